//! The Kustomization controller: watches, the reconcile pipeline driver, status and events.
//!
//! `run` wires it together: telemetry, the client (with the request-counting layer), leader
//! election, and a kube-runtime `Controller` over Kustomizations that also watches the source
//! kinds and maps a new artifact revision to the Kustomizations reading it.

pub(crate) mod dependencies;
mod drift_mode;
pub(crate) mod events;
pub(crate) mod finalize;
mod finalizer;
pub(crate) mod gates;
pub(crate) mod identity;
mod identity_error;
mod kubeconfig;
pub mod options;
mod pacing;
mod parked;
pub(crate) mod reconcile;
mod source_cache;
pub(crate) mod status;
mod substitute_from;
mod workload_identity;

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use flux_runtime::ControllerIdentity;
use flux_runtime::controller::{
    CancellationToken, GRACEFUL_SHUTDOWN, StartError, Started, Stopped, lead_while, run_until,
    run_with_grace, shutdown_signal, start,
};
use flux_runtime::events::Notifier;
use flux_runtime::requeue::{Failures, after_error};
use flux_runtime::status_writes::OwnWrites;
use flux_runtime::telemetry::{self, Metrics};
use flux_runtime::triggers::{own_objects, watched};
use flux_runtime::watch_retry;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Client, ResourceExt};

use crate::api::Kustomization;
use crate::api::conditions::READY;
use crate::api::kustomization::{SourceKind, SubstituteKind};
use crate::api::source::artifact_of;
use crate::applier::{ApplierOptions, LiveWatches, Owner};
use crate::source::{Fetcher, FetcherConfig, LocalHosts};

use identity::Identities;
use options::RunOptions;
pub use reconcile::ReconcileError;

/// Who this controller is in its logs, metrics, events, status writes and Lease: Flux's
/// kustomize-controller.
pub(crate) const IDENTITY: ControllerIdentity = ControllerIdentity {
    controller: "kustomization",
    group: "kustomize.toolkit.fluxcd.io",
    kind: "Kustomization",
    component: "kustomize-controller",
    metrics_prefix: "kustomize_controller",
    field_manager: "gotk-kustomize-controller",
};

/// Everything a reconcile needs, shared by all of them.
pub(crate) struct Context {
    pub options: RunOptions,
    /// The controller's own identity: sources, dependencies, status, events.
    pub client: Client,
    /// Who applies each Kustomization, with the client, kind resolver and applier (and so the
    /// no-op fingerprints) of every identity kept between passes.
    pub identities: Identities,
    pub fetcher: Fetcher,
    /// Remote bases and HTTP files of kustomizations (Git refused with --no-remote-bases).
    pub remote: Arc<crate::remote::RemoteFetcher>,
    /// Builds on the blocking pool, abandoned ones included: one per Kustomization at a time.
    pub builds: Arc<pacing::Builds>,
    /// Canceled when shutdown begins: running reconciles end, running builds stop at their
    /// next check.
    pub shutdown: CancellationToken,
    pub notifier: Notifier<Kustomization>,
    pub metrics: Arc<Metrics>,
    /// The source objects of the source watches, read instead of a GET.
    sources: source_cache::SourceCache,
    /// Consecutive failures per object, for the error backoff.
    failures: Failures,
    /// Consecutive failed artifact downloads per object, for the download retries.
    download_failures: Failures,
    /// Health waits parked off the workers, with the passes they conclude.
    pub waits: parked::Waits<reconcile::ParkedPass>,
    /// Status writes the Kustomization cache does not show yet.
    own_writes: OwnWrites<Kustomization>,
}

impl Context {
    /// Records whether the artifact download of `key` failed and, after a failure, says when
    /// to try again while retries (`--http-retry`) remain. Flux retries inside the reconcile
    /// and holds a worker for minutes while a source server is down, starving every other
    /// Kustomization; requeueing with the same waits leaves the worker free meanwhile.
    pub(crate) fn download_retry(&self, key: &str, failed: bool) -> Option<Duration> {
        let failures = self.download_failures.record(key, failed);
        (failures > 0 && failures <= self.options.artifact_fetch_retries)
            .then(|| self.fetcher.config().retry_wait(failures - 1))
    }
}

/// `namespace/name`: the key of the per-object counters.
fn object_key(ks: &Kustomization) -> String {
    flux_runtime::status_writes::object_key(ks)
}

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("unable to load the kube config: {0}")]
    Config(#[from] kube::config::InferConfigError),
    /// The client, probes, metrics or leader election could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("unable to prepare the artifact cache: {0}")]
    Fetcher(#[from] crate::source::SourceError),
    #[error("unable to prepare the remote bases cache: {0}")]
    Remote(String),
    #[error("leader election lost")]
    LeadershipLost,
}

/// Runs the controller until SIGTERM/SIGINT (Ok) or until leadership is lost (Err).
pub async fn run(options: RunOptions) -> Result<(), RunError> {
    telemetry::init_logs(&options.runtime.log_level, options.runtime.log_encoding);
    for (gate, why) in &options.feature_gates.without_effect {
        tracing::warn!(gate, "feature gate has no effect in this controller: {why}");
    }
    if options.feature_gates.direct_source_fetch {
        tracing::info!(
            "DirectSourceFetch feature gate is enabled, sources will be fetched directly from the API server bypassing the cache"
        );
    }
    let ignored = options.without_effect.set();
    if !ignored.is_empty() {
        tracing::warn!(flags = ?ignored, "flags accepted for compatibility with Flux have no effect in this controller");
    }
    // Artifacts and decrypted sources a killed predecessor (same /tmp after a container
    // restart) left: only our own session directories, whose lock nobody holds.
    for prefix in [crate::source::CACHE_PREFIX, crate::sops::workdir::PREFIX] {
        match crate::tmpdir::remove_stale(&std::env::temp_dir(), prefix) {
            Ok(removed) => {
                for dir in removed {
                    tracing::info!(path = %dir.display(), "removed stale tmp dir");
                }
            }
            Err(error) => tracing::warn!(%error, "cannot look for tmp dirs left by ended processes"),
        }
    }
    let config = kube::Config::infer().await?;
    let Some(Started {
        client,
        counts,
        metrics,
        elector,
        instance: identity,
    }) = start(config.clone(), &IDENTITY, &options.runtime).await?
    else {
        return Ok(());
    };

    let fetcher = Fetcher::new(FetcherConfig {
        max_artifact_bytes: options.max_artifact_size,
        // Retried by requeueing (see `Context::download_retry`), never inside a reconcile.
        retries: 0,
        host_override: LocalHosts::from_env(|name| std::env::var(name).ok()),
        ..FetcherConfig::default()
    })?;
    let remote =
        crate::remote::RemoteFetcher::new(options.remote_lockdown.apply(crate::remote::RemoteConfig {
            allow_git: !options.no_remote_bases,
            ..crate::remote::RemoteConfig::default()
        }))
        .map_err(RunError::Remote)?;
    let release_on_cancel = options.runtime.leader_election_release_on_cancel;
    let (live, live_changes) = LiveWatches::new(client.clone());
    let ctx = Arc::new(Context {
        identities: Identities::new(
            client.clone(),
            config,
            counts,
            &options.default_service_account,
            kubeconfig::KubeconfigPolicy {
                allow_exec: options.insecure_kubeconfig_exec,
                allow_insecure_tls: options.insecure_kubeconfig_tls,
            },
            applier_options(&options),
        )
        .with_workload_policy(options.workload_policy())
        .with_live_watches(live),
        notifier: Notifier::new(
            client.clone(),
            &IDENTITY,
            identity,
            Some(options.runtime.events_addr.clone()),
        ),
        fetcher,
        remote: Arc::new(remote),
        builds: Arc::default(),
        shutdown: CancellationToken::new(),
        metrics,
        client,
        sources: source_cache::SourceCache::default(),
        failures: Failures::default(),
        download_failures: Failures::default(),
        waits: parked::Waits::default(),
        own_writes: OwnWrites::new(IDENTITY.field_manager),
        options,
    });

    let stopped = run_controller(ctx, live_changes);
    match lead_while(elector.as_ref(), release_on_cancel, stopped).await {
        true => Ok(()),
        false => Err(RunError::LeadershipLost),
    }
}

/// The applier settings the flags decide.
pub(crate) fn applier_options(options: &RunOptions) -> ApplierOptions {
    ApplierOptions {
        concurrency: options.concurrent_ssa.max(1),
        custom_stage_kinds: options.custom_stage_kinds(),
        full_sync_every: options.full_sync_interval,
        override_managers: options.override_managers.clone(),
        migrate_api_version: options.feature_gates.migrate_api_version,
        ..ApplierOptions::default()
    }
}

/// A source triggers only when its artifact revision changes (or first appears).
fn artifact_revision_hash(source: &DynamicObject) -> Option<u64> {
    let revision = artifact_of(source).ok().flatten()?.revision;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    revision.hash(&mut hasher);
    Some(hasher.finish())
}

/// The Kustomizations to reconcile for a source with a new artifact: those reading it, except
/// those already at that revision.
pub(crate) fn kustomizations_for_source(
    kustomizations: &[Arc<Kustomization>],
    kind: SourceKind,
    source: &DynamicObject,
) -> Vec<ObjectRef<Kustomization>> {
    let Some(artifact) = artifact_of(source).ok().flatten() else {
        return Vec::new();
    };
    let key = (
        kind.as_str(),
        source.namespace().unwrap_or_default(),
        source.name_any(),
    );
    kustomizations
        .iter()
        .filter(|ks| dependencies::source_key(ks) == key)
        .filter(|ks| {
            let status = ks.status.as_ref();
            let attempted =
                status.and_then(|s| s.last_attempted_revision.as_deref()) == Some(artifact.revision.as_str());
            let ready = status.is_some_and(|s| status::is_true(&s.conditions, READY));
            !(attempted && ready)
        })
        .map(|ks| ObjectRef::from_obj(ks.as_ref()))
        .collect()
}

/// The Kustomizations that read the ConfigMap (`secret` false) or Secret `namespace/name`:
/// through postBuild.substituteFrom, decryption.secretRef or kubeConfig, as Flux indexes
/// them. Optional references count too: the object appearing or going away matters.
pub(crate) fn kustomizations_for_config(
    kustomizations: &[Arc<Kustomization>],
    secret: bool,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<Kustomization>> {
    let reads = |ks: &Kustomization| {
        let spec = &ks.spec;
        let substitutes = spec
            .post_build
            .iter()
            .flat_map(|p| &p.substitute_from)
            .any(|r| r.name == name && (r.kind == SubstituteKind::Secret) == secret);
        let kube_config = spec.kube_config.as_ref().is_some_and(|k| {
            if secret {
                k.secret_ref.as_ref().is_some_and(|r| r.name == name)
            } else {
                k.config_map_ref.as_ref().is_some_and(|r| r.name == name)
            }
        });
        let decryption = secret
            && spec
                .decryption
                .as_ref()
                .and_then(|d| d.secret_ref.as_ref())
                .is_some_and(|r| r.name == name);
        substitutes || kube_config || decryption
    };
    kustomizations
        .iter()
        .filter(|ks| ks.namespace().as_deref() == Some(namespace) && reads(ks))
        .map(|ks| ObjectRef::from_obj(ks.as_ref()))
        .collect()
}

/// Labelled ConfigMaps and Secrets, metadata only: a change of resourceVersion (or a
/// deletion) re-reads the values of the Kustomizations that use them.
fn watch_configs(
    controller: Controller<Kustomization>,
    ctx: &Context,
    reader: &Store<Kustomization>,
) -> Controller<Kustomization> {
    let controller = watch_config_kind::<ConfigMap>(controller, ctx, reader, false);
    watch_config_kind::<Secret>(controller, ctx, reader, true)
}

/// One kind of [`watch_configs`]: ConfigMaps (`secret` false) or Secrets.
fn watch_config_kind<K>(
    controller: Controller<Kustomization>,
    ctx: &Context,
    reader: &Store<Kustomization>,
    secret: bool,
) -> Controller<Kustomization>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let options = &ctx.options;
    let config = watch_retry::config().labels(&options.watch_configs_label_selector);
    let changes = watch_retry::with_backoff(watcher(
        watched::<PartialObjectMeta<K>>(&ctx.client, &options.runtime),
        config,
    ))
    .touched_objects()
    .predicate_filter(predicates::resource_version, Default::default());
    let store = reader.clone();
    controller.watches_stream(changes, move |object| {
        kustomizations_for_config(
            &store.state(),
            secret,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
        )
    })
}

/// `live_changes`: owners of objects changed out of band, from the shared metadata watches.
async fn run_controller(ctx: Arc<Context>, live_changes: tokio::sync::mpsc::Receiver<Owner>) {
    let options = &ctx.options;
    let seen = ctx.clone();
    let (reader, kustomizations) = own_objects(&ctx.client, &options.runtime, move |ks: &Kustomization| {
        seen.own_writes.seen(&object_key(ks), ks)
    });
    let mut controller = watch_retry::controller(kustomizations, reader.clone(), options.runtime.concurrent);

    // ExternalArtifact stays behind Flux's (default-off) feature gate.
    let external = options
        .feature_gates
        .external_artifact
        .then_some(SourceKind::ExternalArtifact);
    let kinds = [
        SourceKind::GitRepository,
        SourceKind::OCIRepository,
        SourceKind::Bucket,
    ];
    for kind in kinds.into_iter().chain(external) {
        let resource = kind.api_resource();
        let api: Api<DynamicObject> = if options.runtime.watch_all_namespaces {
            Api::all_with(ctx.client.clone(), &resource)
        } else {
            Api::namespaced_with(ctx.client.clone(), &options.runtime.runtime_namespace, &resource)
        };
        let store: Store<Kustomization> = reader.clone();
        let cache = reflector::store::Writer::new(resource.clone());
        ctx.sources.register(kind, cache.as_reader());
        let observer = ctx.clone();
        let sources = watch_retry::with_backoff(watcher(api, watch_retry::config()))
            .inspect(move |item| observer.sources.observe(kind, item))
            .modify(|source: &mut DynamicObject| source.managed_fields_mut().clear())
            .reflect(cache)
            .applied_objects()
            .predicate_filter(artifact_revision_hash, Default::default());
        controller = controller.watches_stream_with(
            sources,
            move |source| kustomizations_for_source(&store.state(), kind, &source),
            resource,
        );
    }

    if !options.feature_gates.disable_config_watchers {
        controller = watch_configs(controller, &ctx, &reader);
    }
    // A parked health wait that ended asks for the run that concludes its pass.
    if let Some(ended) = ctx.waits.triggers() {
        controller = controller.reconcile_on(ended);
    }
    controller = controller.reconcile_on(drift_mode::triggers(live_changes, reader.clone()));

    let (shutdown, builds) = (ctx.shutdown.clone(), ctx.builds.clone());
    let run = async {
        run_until(
            &IDENTITY,
            controller,
            shutdown.clone(),
            reconcile::reconcile,
            error_policy,
            ctx,
        )
        .await;
        // Builds canceled on their blocking threads are waited for: they remove their work
        // directories (decrypted sources among them) on the way out.
        builds.all_returned().await;
    };
    if run_with_grace(shutdown_signal(), GRACEFUL_SHUTDOWN, &shutdown, run).await == Stopped::GracePeriodOver
    {
        tracing::warn!("graceful shutdown period over: exiting with reconciles still running");
    }
}

/// Errors that reach here were not turned into a requeue by the driver: terminal ones wait
/// for a change of the object; transient ones back off exponentially (Flux: 750 ms … 15 min).
fn error_policy(ks: Arc<Kustomization>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    after_error(
        &IDENTITY,
        ks.as_ref(),
        error,
        error.is_terminal(),
        &ctx.failures,
        &ctx.metrics.runtime,
        &ctx.options.runtime,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ks(name: &str, source: serde_json::Value, status: serde_json::Value) -> Arc<Kustomization> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": name, "namespace": "apps"},
                "spec": {"interval": "5m", "prune": true, "sourceRef": source},
                "status": status,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_new_artifact_maps_to_the_kustomizations_reading_it() {
        let source: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "repo", "namespace": "apps"},
            "status": {"artifact": {"url": "http://a/x.tar.gz", "revision": "main@sha1:2"}}
        }))
        .unwrap();
        let ready_at = |rev: &str| {
            json!({"lastAttemptedRevision": rev, "conditions": [{"type": "Ready", "status": "True",
                "reason": "ReconciliationSucceeded", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
        };
        let all = [
            ks(
                "old",
                json!({"kind": "GitRepository", "name": "repo"}),
                ready_at("main@sha1:1"),
            ),
            ks(
                "current",
                json!({"kind": "GitRepository", "name": "repo"}),
                ready_at("main@sha1:2"),
            ),
            ks(
                "cross-ns",
                json!({"kind": "GitRepository", "name": "repo", "namespace": "apps"}),
                json!({}),
            ),
            ks("other-kind", json!({"kind": "Bucket", "name": "repo"}), json!({})),
            ks(
                "other-name",
                json!({"kind": "GitRepository", "name": "other"}),
                json!({}),
            ),
        ];
        let names: Vec<_> = kustomizations_for_source(&all, SourceKind::GitRepository, &source)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["old", "cross-ns"]);
    }

    #[test]
    fn a_changed_config_maps_to_the_kustomizations_reading_it() {
        let with = |name: &str, namespace: &str, extra: serde_json::Value| -> Arc<Kustomization> {
            let mut spec = json!({"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}});
            spec.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                    "metadata": {"name": name, "namespace": namespace}, "spec": spec,
                }))
                .unwrap(),
            )
        };
        let all = vec![
            with(
                "vars",
                "apps",
                json!({"postBuild": {"substituteFrom": [
                {"kind": "ConfigMap", "name": "settings"}, {"kind": "Secret", "name": "creds", "optional": true}]}}),
            ),
            with(
                "remote",
                "apps",
                json!({"kubeConfig": {"secretRef": {"name": "creds"}}}),
            ),
            with(
                "remote-cm",
                "apps",
                json!({"kubeConfig": {"configMapRef": {"name": "settings"}}}),
            ),
            with(
                "sops",
                "apps",
                json!({"decryption": {"provider": "sops", "secretRef": {"name": "creds"}}}),
            ),
            with(
                "other-ns",
                "web",
                json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "settings"}]}}),
            ),
            with("plain", "apps", json!({})),
        ];
        let names = |secret: bool, namespace: &str, name: &str| -> Vec<String> {
            kustomizations_for_config(&all, secret, namespace, name)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(false, "apps", "settings"), ["vars", "remote-cm"]);
        assert_eq!(names(true, "apps", "creds"), ["vars", "remote", "sops"]);
        assert_eq!(
            names(true, "apps", "settings"),
            Vec::<String>::new(),
            "a Secret is not the ConfigMap of that name"
        );
        assert_eq!(names(false, "web", "settings"), ["other-ns"]);
    }
}
