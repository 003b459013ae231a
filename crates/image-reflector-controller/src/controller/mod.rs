//! The image reflection controllers: `run` wires telemetry, probes, metrics, leader election
//! and the watches (as the Kustomization controller does, through `flux_runtime`), and the
//! pipelines reconcile. ImageRepository scans live in `repository`, ImagePolicy evaluations
//! in `policy`; both controllers run side by side in one process under one leadership.

pub(crate) mod finalizers;
pub(crate) mod policy;
pub mod repository;

use std::sync::Arc;

use flux_runtime::ControllerIdentity;
use flux_runtime::controller::{
    CancellationToken, GRACEFUL_SHUTDOWN, StartError, Started, Stopped, lead_while, run_until,
    run_with_grace, shutdown_signal, start,
};
use flux_runtime::events::Notifier;
use flux_runtime::requeue::{Failures, after_error};
use flux_runtime::status_writes::{OwnWrites, object_key};
use flux_runtime::telemetry::{self, Metrics, ObjectLabels, ReconcileResult};
use flux_runtime::triggers::own_objects;
use flux_runtime::watch_retry;
use kube::Client;
use kube::runtime::controller::Action;

use crate::api::ImageRepository;
use crate::options::{InvalidOptions, RunOptions};
use crate::registry::Limits;
use crate::store::{StoreError, TagStore};
use crate::{IMAGE_POLICY, IMAGE_REPOSITORY};
use repository::ReconcileError;

/// The annotation that asks for a reconcile now (`flux reconcile`).
pub(crate) use flux_runtime::triggers::REQUESTED_AT_ANNOTATION;

/// Everything a reconcile needs, shared by all of them.
pub(crate) struct Context {
    pub options: RunOptions,
    pub client: Client,
    pub store: Arc<TagStore>,
    pub registry_limits: Limits,
    pub notifier: Notifier<ImageRepository>,
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per object, for the error backoff.
    failures: Failures,
    /// Status writes the ImageRepository cache does not show yet.
    own_writes: OwnWrites<ImageRepository>,
    /// The ImagePolicy controller's own state.
    pub(crate) policies: policy::run::Policies,
}

/// Flux's labels of `gotk_reconcile_duration_seconds` for one object of `identity`'s kind.
fn object_labels(identity: &ControllerIdentity, namespace: &str, name: &str) -> ObjectLabels {
    ObjectLabels {
        kind: identity.kind.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
    }
}

fn result_label(ok: bool) -> ReconcileResult {
    if ok {
        ReconcileResult::Success
    } else {
        ReconcileResult::Failure
    }
}

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Options(#[from] InvalidOptions),
    #[error("unable to load the kube config: {0}")]
    Config(#[from] kube::config::InferConfigError),
    /// The client, probes, metrics or leader election could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("unable to open the tag store: {0}")]
    Store(#[from] StoreError),
    #[error("leader election lost")]
    LeadershipLost,
}

/// Runs the controller until SIGTERM/SIGINT (Ok) or until leadership is lost (Err).
pub async fn run(options: RunOptions) -> Result<(), RunError> {
    telemetry::init_logs(&options.runtime.log_level, options.runtime.log_encoding);
    options.validate()?;
    for (gate, why) in &options.feature_gates.without_effect {
        tracing::warn!(gate, "feature gate has no effect in this controller: {why}");
    }
    let ignored = options.without_effect.set();
    if !ignored.is_empty() {
        tracing::warn!(flags = ?ignored, "flags accepted for compatibility with Flux have no effect in this controller");
    }
    let threshold_kib = usize::try_from(options.storage_compression_threshold_kib).unwrap_or(usize::MAX);
    let store = Arc::new(TagStore::new(&options.storage_path, threshold_kib)?);

    let config = kube::Config::infer().await?;
    let Some(Started {
        client,
        counts: _,
        metrics,
        elector,
        instance: identity,
    }) = start(config, &IMAGE_REPOSITORY, &options.runtime).await?
    else {
        return Ok(());
    };

    let release_on_cancel = options.runtime.leader_election_release_on_cancel;
    let policy_metrics = metrics.runtime.for_controller(IMAGE_POLICY.controller);
    policy_metrics.set_max_concurrent(options.runtime.concurrent);
    let ctx = Arc::new(Context {
        policies: policy::run::Policies::new(
            Notifier::new(
                client.clone(),
                &IMAGE_POLICY,
                identity.clone(),
                Some(options.runtime.events_addr.clone()),
            ),
            policy_metrics,
        ),
        notifier: Notifier::new(
            client.clone(),
            &IMAGE_REPOSITORY,
            identity,
            Some(options.runtime.events_addr.clone()),
        ),
        client,
        store,
        registry_limits: Limits::default(),
        metrics,
        failures: Failures::default(),
        own_writes: OwnWrites::new(IMAGE_REPOSITORY.field_manager),
        options,
    });
    // SIGTERM cancels the scans and evaluations running in both controllers.
    let shutdown = CancellationToken::new();
    let stopped = async {
        let run = async {
            tokio::join!(
                run_repositories(ctx.clone(), shutdown.clone()),
                policy::run::run_policies(ctx, shutdown.clone())
            );
        };
        if run_with_grace(shutdown_signal(), GRACEFUL_SHUTDOWN, &shutdown, run).await
            == Stopped::GracePeriodOver
        {
            tracing::warn!("graceful shutdown period over: exiting with reconciles still running");
        }
    };
    match lead_while(elector.as_ref(), release_on_cancel, stopped).await {
        true => Ok(()),
        false => Err(RunError::LeadershipLost),
    }
}

/// The ImageRepository controller: every namespace or the runtime one, label-selected shards.
async fn run_repositories(ctx: Arc<Context>, shutdown: CancellationToken) {
    let seen = ctx.clone();
    let (reader, repositories) = own_objects(
        &ctx.client,
        &ctx.options.runtime,
        move |repo: &ImageRepository| seen.own_writes.seen(&object_key(repo), repo),
    );
    let controller = watch_retry::controller(repositories, reader, ctx.options.runtime.concurrent);
    run_until(
        &IMAGE_REPOSITORY,
        controller,
        shutdown,
        repository::reconcile,
        error_policy,
        ctx,
    )
    .await;
}

/// Terminal errors wait for a change of the object; the rest back off exponentially.
fn error_policy(repo: Arc<ImageRepository>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    after_error(
        &IMAGE_REPOSITORY,
        repo.as_ref(),
        error,
        error.is_terminal(),
        &ctx.failures,
        &ctx.metrics.runtime,
        &ctx.options.runtime,
    )
}
