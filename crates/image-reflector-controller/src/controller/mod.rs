//! The image reflection controllers: `run` wires telemetry, probes, metrics, leader election
//! and the watches (as the Kustomization controller does, through `flux_runtime`), and the
//! pipelines reconcile. ImageRepository scans live in `repository`, ImagePolicy evaluations
//! in `policy`; both controllers run side by side in one process under one leadership.

pub mod finalizers;
pub(crate) mod policy;
pub mod repository;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use flux_runtime::ControllerIdentity;
use flux_runtime::controller::{StartError, Started, lead_while, shutdown_signal, start};
use flux_runtime::events::Notifier;
use flux_runtime::status_writes::{OwnWrites, StatusWriteError, object_key};
use flux_runtime::telemetry::{self, Metrics, ObjectLabels, ReconcileResult};
use flux_runtime::watch_retry;
use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::{ImageRepository, ImageRepositoryStatus};
use crate::options::{InvalidOptions, RunOptions};
use crate::registry::Limits;
use crate::store::{StoreError, TagStore};
use crate::{IMAGE_POLICY, IMAGE_REPOSITORY};
use repository::ReconcileError;

/// The annotation that asks for a reconcile now (`flux reconcile`).
pub(crate) const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Everything a reconcile needs, shared by all of them.
pub(crate) struct Context {
    pub options: RunOptions,
    pub client: Client,
    pub store: Arc<TagStore>,
    pub registry_limits: Limits,
    pub notifier: Notifier<ImageRepository>,
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per object, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Status writes the ImageRepository cache does not show yet.
    own_writes: OwnWrites<ImageRepository>,
    /// The ImagePolicy controller's own state.
    pub(crate) policies: policy::run::Policies,
}

impl Context {
    /// One more failure of `key`, or back to zero after a success.
    fn failure_count(&self, key: &str, failed: bool) -> u32 {
        let mut counts = self.failures.lock().expect("failure counts lock");
        if failed {
            let count = counts.entry(key.to_string()).or_default();
            *count += 1;
            *count
        } else {
            counts.remove(key);
            0
        }
    }
}

/// Server-side apply of an ImageRepository's status by `gotk-image-reflector-controller`.
pub(crate) async fn write_status(
    ctx: &Context,
    repo: &ImageRepository,
    status: &ImageRepositoryStatus,
) -> Result<(), StatusWriteError> {
    flux_runtime::status_writes::write_status(
        &ctx.client,
        IMAGE_REPOSITORY.field_manager,
        &ctx.own_writes,
        repo,
        status,
    )
    .await
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
        failures: Mutex::default(),
        own_writes: OwnWrites::default(),
        options,
    });
    let stopped = async {
        tokio::join!(run_repositories(ctx.clone()), policy::run::run_policies(ctx));
    };
    match lead_while(elector.as_ref(), release_on_cancel, stopped).await {
        true => Ok(()),
        false => Err(RunError::LeadershipLost),
    }
}

/// What makes an ImageRepository worth reconciling again (Flux's generation and
/// requested-at predicates), plus finalizer changes and deletion. Status writes do not.
fn trigger_hash(repo: &ImageRepository) -> Option<u64> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    repo.metadata.generation.hash(&mut hasher);
    repo.annotations().get(REQUESTED_AT_ANNOTATION).hash(&mut hasher);
    repo.finalizers().hash(&mut hasher);
    repo.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    Some(hasher.finish())
}

/// The ImageRepository controller: every namespace or the runtime one, label-selected shards.
async fn run_repositories(ctx: Arc<Context>) {
    let runtime = &ctx.options.runtime;
    let api: Api<ImageRepository> = if runtime.watch_all_namespaces {
        Api::all(ctx.client.clone())
    } else {
        Api::namespaced(ctx.client.clone(), &runtime.runtime_namespace)
    };
    let mut config = watch_retry::config();
    if !runtime.watch_label_selector.is_empty() {
        config = config.labels(&runtime.watch_label_selector);
    }
    let (reader, writer) = reflector::store();
    let seen = ctx.clone();
    let repositories = watch_retry::with_backoff(watcher(api, config))
        .modify(|repo: &mut ImageRepository| repo.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects()
        .inspect_ok(move |repo| seen.own_writes.seen(&object_key(repo), repo))
        .predicate_filter(trigger_hash, Default::default());
    watch_retry::controller(repositories, reader, runtime.concurrent)
        .graceful_shutdown_on(shutdown_signal())
        .run(repository::reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
}

/// Terminal errors wait for a change of the object; the rest back off exponentially
/// (`--min-retry-delay` .. `--max-retry-delay`).
fn error_policy(repo: Arc<ImageRepository>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let span = telemetry::logs::reconcile_span(
        &IMAGE_REPOSITORY,
        &repo.namespace().unwrap_or_default(),
        &repo.name_any(),
    );
    let _entered = span.enter();
    if error.is_terminal() {
        tracing::error!(%error, "Reconciler error: waiting for a change of the object");
        return Action::await_change();
    }
    let failures = ctx.failure_count(&object_key(repo.as_ref()), true);
    ctx.metrics.runtime.record_retry();
    tracing::error!(%error, "Reconciler error");
    Action::requeue(flux_runtime::requeue::backoff(
        failures,
        ctx.options.runtime.min_retry_delay,
        ctx.options.runtime.max_retry_delay,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn status_writes_do_not_trigger_but_requests_and_spec_changes_do() {
        let base: ImageRepository = serde_json::from_value(json!({
            "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
            "metadata": {"name": "a", "namespace": "apps", "generation": 1},
            "spec": {"image": "ghcr.io/a/b", "interval": "5m"},
        }))
        .unwrap();
        let mut status_only = base.clone();
        status_only.status = Some(ImageRepositoryStatus::default());
        status_only.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        assert_eq!(trigger_hash(&base), trigger_hash(&status_only));

        let mut requested = base.clone();
        requested.metadata.annotations =
            Some([("reconcile.fluxcd.io/requestedAt".to_string(), "1".to_string())].into());
        assert_ne!(trigger_hash(&base), trigger_hash(&requested));

        let mut new_generation = base.clone();
        new_generation.metadata.generation = Some(2);
        assert_ne!(trigger_hash(&base), trigger_hash(&new_generation));
    }
}
