//! The reconcile pipeline driver. It reads like the pipeline:
//!
//! ```text
//! resolve source -> dependsOn -> [progress write] -> fetch -> build (blocking pool)
//!   -> apply -> inventory -> prune -> health -> status (one final write, only if it changed)
//! ```
//!
//! Steps that touch the API: resolve, dependsOn, vars, apply, prune, health, status writes and
//! events. Status is computed by the pure `status` module from what the steps returned; events
//! are collected during the pass and emitted at the end, only for real changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Client, ResourceExt};
use tracing::Instrument;

use crate::api::conditions::{READY, keys, reason};
use crate::api::kustomization::{KustomizationStatus, SubstituteKind};
use crate::api::{Kustomization, ResourceInventory, duration};
use crate::applier::inventory::{inventory_of, stale};
use crate::applier::{
    Action as ChangeAction, Applier, ApplyError, ApplyRequest, ChangeSet, Owner, PruneError,
};
use crate::error::StepError;
use crate::flux as flux_build;
use crate::health::{self, HealthError, WaitTarget};
use crate::kube_ext::ResourceResolver;
use crate::kustomize::{BuildOptions, packed};
use crate::source::{SourceAccess, SourceError, get_artifact, resolve_path};
use crate::telemetry::{ObjectLabels, ReconcileResult};

use super::clients::ClientError;
use super::dependencies::{DependencyError, check_dependencies};
use super::events::{self, Notice};
use super::status::{self, Applied, BuiltRevision, Failed, Progress, Stamp};
use super::{Context, finalize, jittered};

/// Errors that leave the driver as errors (the rest become a status and a requeue).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("failed to update status: {0}")]
    StatusWrite(#[source] kube::Error),
    /// Reading the source failed for a reason a retry may fix.
    #[error("{0}")]
    Source(#[source] SourceError),
    /// A configuration error: retrying cannot help until the object changes.
    #[error("{0}")]
    Terminal(String),
    #[error("{0}")]
    Finalize(#[from] finalize::FinalizeError),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Terminal(_) => true,
            Self::Finalizer(error) => match error.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.is_terminal(),
                _ => false,
            },
            _ => false,
        }
    }
}

/// Entry point for the kube-runtime Controller.
pub async fn reconcile(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = ks.namespace().unwrap_or_default();
    let name = ks.name_any();
    let key = super::object_key(&ks);
    // `kustomization`, not `name`: the JSON formatter writes the span's own name under `name`.
    let span = tracing::info_span!("reconcile", namespace = %namespace, kustomization = %name, revision = tracing::field::Empty);
    let labels = ObjectLabels {
        kind: "Kustomization".into(),
        name: name.clone(),
        namespace: namespace.clone(),
    };
    let started = Instant::now();
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, keys::FINALIZER, ks, |event| async {
        match event {
            FinalizerEvent::Apply(ks) => reconcile_apply(ks, &ctx).await,
            FinalizerEvent::Cleanup(ks) => finalize::cleanup(&ks, &ctx)
                .await
                .map(|()| Action::await_change())
                .map_err(ReconcileError::from),
        }
    })
    .instrument(span)
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)));
    let (result_label, failed) = match &result {
        Ok(_) => (ReconcileResult::Success, false),
        Err(_) => (ReconcileResult::Failure, true),
    };
    ctx.failure_count(&key, failed);
    ctx.metrics
        .record_reconcile(&labels, started.elapsed(), result_label);
    result
}

/// A step that failed, with what the status and the requeue should say.
struct StepFailure {
    failed: Failed,
    /// `Some(d)`: requeue after `d` (Flux's "nil error" requeues). `None`: return an error.
    requeue: Option<Duration>,
    /// Flux emits no event for a missing source or artifact.
    notify: bool,
    /// A Normal event instead of the Warning (dependencies not ready).
    notice: Option<Notice>,
    error: Option<ReconcileError>,
}

impl StepFailure {
    fn new(reason: &'static str, message: String, requeue: Duration) -> Self {
        Self {
            failed: Failed {
                reason,
                message,
                terminal: false,
                build: None,
                inventory: None,
                unhealthy: false,
            },
            requeue: Some(requeue),
            notify: true,
            notice: None,
            error: None,
        }
    }
}

/// What one pass did, threaded through the steps.
struct Pass {
    ks: Arc<Kustomization>,
    old: KustomizationStatus,
    status: KustomizationStatus,
    stamp: Stamp,
    revision: Option<String>,
    origin_revision: Option<String>,
    started: Instant,
    /// Change-set event lines collected from apply and prune.
    changes: Vec<String>,
}

impl Pass {
    fn metadata(&self) -> BTreeMap<String, String> {
        events::metadata(
            &self.ks,
            self.revision.as_deref(),
            self.origin_revision.as_deref(),
        )
    }

    fn step(&mut self, step: Progress) {
        if let Some(revision) = &self.revision {
            let timeout = self.ks.spec.timeout();
            status::mark_reconciling(
                &mut self.status.conditions,
                &self.stamp,
                reason::PROGRESSING,
                &step.message(revision, timeout),
            );
        }
    }
}

async fn reconcile_apply(ks: Arc<Kustomization>, ctx: &Context) -> Result<Action, ReconcileError> {
    let old = ks.status.clone().unwrap_or_default();
    let stamp = Stamp {
        generation: ks.metadata.generation.unwrap_or_default(),
        now: Timestamp::now(),
    };
    let requested_at = ks.annotations().get(keys::REQUESTED_AT_ANNOTATION).cloned();
    let mut pass = Pass {
        ks: ks.clone(),
        status: old.clone(),
        old,
        stamp,
        revision: None,
        origin_revision: None,
        started: Instant::now(),
        changes: Vec::new(),
    };

    if ks.spec.suspend {
        tracing::info!("reconciliation is suspended for this object");
        status::finalize_status(&mut pass.status, &pass.stamp, requested_at.as_deref());
        write_if_changed(ctx, &pass).await?;
        return Ok(Action::await_change());
    }

    let outcome = run_pipeline(&mut pass, ctx).await;
    status::finalize_status(&mut pass.status, &pass.stamp, requested_at.as_deref());
    status::keep_transition_times(&pass.old, &mut pass.status);
    let written = write_if_changed(ctx, &pass).await?;
    let ready = status::find(&pass.status.conditions, READY).map(|c| c.status.clone());
    let labels = ObjectLabels {
        kind: "Kustomization".into(),
        name: ks.name_any(),
        namespace: ks.namespace().unwrap_or_default(),
    };
    ctx.metrics.record_ready(&labels, ready.as_deref());

    // Events: change-set lines always (they are changes); outcome events only when the
    // status says something new, so a quiet interval emits nothing.
    let metadata = pass.metadata();
    if !pass.changes.is_empty() {
        ctx.notifier
            .emit(
                &ks,
                &Notice::info(reason::PROGRESSING, pass.changes.join("\n"), metadata.clone()),
            )
            .await;
    }
    match outcome {
        Ok(()) => {
            let message = format!(
                "Reconciliation finished in {}, next run in {}",
                duration::format(pass.started.elapsed()),
                duration::format(ks.spec.interval())
            );
            tracing::info!("{message}");
            if written && ready_changed(&pass.old, &pass.status) {
                let mut metadata = metadata;
                metadata.insert(events::COMMIT_STATUS_KEY.into(), "update".into());
                ctx.notifier
                    .emit(
                        &ks,
                        &Notice::info(reason::RECONCILIATION_SUCCEEDED, message, metadata),
                    )
                    .await;
            }
            let random: f64 = rand::random();
            Ok(Action::requeue(jittered(
                ks.spec.interval(),
                ctx.options.interval_jitter_percentage,
                random,
            )))
        }
        Err(failure) => {
            tracing::info!(reason = failure.failed.reason, message = %failure.failed.message, "reconciliation failed");
            if ready_changed(&pass.old, &pass.status) {
                if let Some(notice) = failure.notice {
                    ctx.notifier.emit(&ks, &notice).await;
                } else if failure.notify {
                    let notice =
                        Notice::error(failure.failed.reason, failure.failed.message.clone(), metadata);
                    ctx.notifier.emit(&ks, &notice).await;
                }
            }
            match (failure.error, failure.requeue) {
                (Some(error), _) => Err(error),
                (None, Some(after)) => Ok(Action::requeue(after)),
                (None, None) => Ok(Action::await_change()),
            }
        }
    }
}

/// Whether the Ready condition says something else than before (a new failure, a recovery, a
/// new revision).
fn ready_changed(old: &KustomizationStatus, new: &KustomizationStatus) -> bool {
    let view = |s: &KustomizationStatus| {
        status::find(&s.conditions, READY).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    view(old) != view(new)
}

async fn run_pipeline(pass: &mut Pass, ctx: &Context) -> Result<(), StepFailure> {
    let ks = pass.ks.clone();
    let spec = &ks.spec;
    let requeue_dependency = ctx.options.requeue_dependency;

    // Health expressions are configuration: check them before doing any work.
    let exprs = health::cel::compile(&spec.health_check_exprs).map_err(|e| {
        let mut failure = StepFailure::new(e.reason(), e.terminal_message(), Duration::ZERO);
        failure.failed.terminal = true;
        failure.requeue = None;
        status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
        failure
    })?;

    // Resolve the source and its artifact.
    let resolved = get_artifact(
        &ctx.client,
        &ks,
        SourceAccess {
            no_cross_namespace_refs: ctx.options.no_cross_namespace_refs,
            external_artifact: ctx.options.feature_gates.external_artifact,
        },
    )
    .await
    .map_err(|e| source_failure(pass, e, requeue_dependency))?;
    let artifact = resolved.artifact;
    pass.revision = Some(artifact.revision.clone());
    pass.origin_revision = artifact.origin_revision().map(str::to_string);
    tracing::Span::current().record("revision", artifact.revision.as_str());

    // dependsOn.
    if !spec.depends_on.is_empty() {
        check_dependencies(&ctx.client, &ks, &artifact.revision)
            .await
            .map_err(|e| dependency_failure(pass, e, requeue_dependency))?;
    }

    // New work: say so before the (possibly long) rest of the pass.
    // (A retry of the same revision and generation is not new work: Ready already records the
    // generation the last attempt saw.)
    let attempted_generation = status::find(&pass.old.conditions, READY).and_then(|c| c.observed_generation);
    let new_work = pass.old.last_attempted_revision.as_deref() != Some(artifact.revision.as_str())
        || attempted_generation != Some(pass.stamp.generation);
    status::mark_progress(
        &mut pass.status,
        &pass.stamp,
        Progress::Fetching,
        &artifact.revision,
        spec.timeout(),
    );
    if new_work {
        write_status(ctx, &ks, &pass.status)
            .await
            .map_err(|e| StepFailure {
                requeue: None,
                error: Some(e),
                ..StepFailure::new(
                    reason::RECONCILIATION_FAILED,
                    "failed to update status".into(),
                    Duration::ZERO,
                )
            })?;
    }

    // Fetch.
    let retry = spec.retry_interval();
    let fetched = ctx.fetcher.fetch(&artifact).await;
    let download_failed = matches!(fetched, Err(SourceError::Download { .. }));
    let download_retry = ctx.download_retry(&super::object_key(&pass.ks), download_failed);
    let tree = fetched.map_err(|e| {
        let mut failure = source_failure(pass, e, requeue_dependency);
        if let Some(after) = download_retry {
            tracing::info!(retry_in = %duration::format(after), "artifact download failed, retrying");
            failure.requeue = Some(after);
        }
        failure
    })?;
    let dir = resolve_path(tree.root(), spec.path.as_deref())
        .map_err(|e| source_failure(pass, e, requeue_dependency))?;
    pass.status.last_attempted_revision = Some(artifact.revision.clone());
    pass.step(Progress::Building);

    // The client objects are applied with.
    let client = ctx
        .clients
        .for_kustomization(&ks)
        .await
        .map_err(|e| client_failure(e, retry))?;

    // Build (CPU-bound: off the async workers).
    let vars = substitution_vars(&ctx.client, &ks).await.map_err(|message| {
        let failure = StepFailure::new(reason::BUILD_FAILED, message, retry);
        status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
        failure
    })?;
    let (root, build_spec) = (tree.root().to_path_buf(), spec.clone());
    let strict = ctx.options.feature_gates.strict_post_build_substitutions;
    let built = match tokio::task::spawn_blocking(move || {
        flux_build::build_with_strictness(&root, &dir, &build_spec, &vars, &BuildOptions::new(), strict)
    })
    .await
    {
        Ok(Ok(built)) => Ok(built),
        Ok(Err(e)) => Err(StepFailure::new(e.reason(), e.to_string(), retry)),
        Err(e) => Err(StepFailure::new(
            reason::BUILD_FAILED,
            format!("build panicked: {e}"),
            retry,
        )),
    }
    .inspect_err(|failure| status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed))?;
    drop(tree);
    // Said once per revision: the interval's rebuilds of the same input would repeat it.
    if pass.old.last_applied_revision.as_deref() != Some(artifact.revision.as_str()) {
        for warning in &built.warnings {
            tracing::warn!("build warning: {warning}");
        }
    }
    let built_revision = BuiltRevision {
        digest: built.digest.clone(),
        revision: artifact.revision.clone(),
        origin_revision: pass.origin_revision.clone(),
        duration: Duration::ZERO,
    };
    pass.step(Progress::DetectingDrift);

    // Apply, with the shared applier (and its no-op fingerprints) unless impersonating or
    // targeting another cluster.
    let owner = Owner::new(&ks.name_any(), &ks.namespace().unwrap_or_default());
    let (resolver, own_applier);
    let applier: &Applier = if uses_own_client(spec, ctx) {
        resolver = ctx.resolver.clone();
        &ctx.applier
    } else {
        resolver = ResourceResolver::new(client);
        own_applier = Applier::new(resolver.clone(), ctx.applier.options().clone());
        &own_applier
    };
    let request = ApplyRequest {
        owner: owner.clone(),
        objects: packed::values(&built.objects),
        force: spec.force,
        ignore: &spec.ignore,
        revision: &artifact.revision,
        digest: &built.digest,
    };
    let applied_changes = applier.apply(request).await;
    pass.stamp.now = Timestamp::now();
    let changes = applied_changes.map_err(|e| apply_failure(pass, e, &built_revision, retry))?;
    record_changes(pass, ctx, &changes);

    // Inventory and prune.
    let previous = pass.old.inventory.clone().unwrap_or_default();
    let mut inventory = inventory_of(&changes);
    let stale_entries = stale(&previous, &inventory);
    if spec.prune && !stale_entries.is_empty() {
        match applier.prune(&owner, &stale_entries).await {
            Ok(pruned) => record_changes(pass, ctx, &pruned),
            Err(error) => return Err(prune_failure(pass, ctx, error, inventory, &built_revision, retry)),
        }
    }

    // Health.
    let targets = health_targets(spec, &ks, &changes);
    let mut health_elapsed = None;
    if !targets.is_empty() {
        pass.step(Progress::HealthChecks);
        let started = Instant::now();
        let waited = health::wait(
            &resolver,
            &targets,
            &exprs,
            spec.timeout(),
            std::future::pending(),
        )
        .await;
        pass.stamp.now = Timestamp::now();
        if let Err(error) = waited {
            let mut failure = StepFailure::new(error.reason(), error.to_string(), retry);
            failure.failed.unhealthy = !matches!(error, HealthError::Canceled);
            failure.failed.build = Some(BuiltRevision {
                duration: pass.started.elapsed(),
                ..built_revision
            });
            failure.failed.inventory = Some(std::mem::take(&mut inventory));
            status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
            return Err(failure);
        }
        health_elapsed = Some(started.elapsed());
    }

    let applied = Applied {
        revision: artifact.revision.clone(),
        origin_revision: pass.origin_revision.clone(),
        inventory,
        digest: built.digest,
        health: health_elapsed,
        duration: pass.started.elapsed(),
    };
    status::mark_applied(&mut pass.status, &pass.stamp, &applied);
    Ok(())
}

/// Whether this Kustomization applies with the controller's own client.
pub fn uses_own_client(spec: &crate::api::KustomizationSpec, ctx: &Context) -> bool {
    spec.kube_config.is_none()
        && spec
            .service_account_name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        && ctx.options.default_service_account.is_empty()
}

/// The objects to wait for: everything applied with `wait`, else `healthChecks`.
fn health_targets(
    spec: &crate::api::KustomizationSpec,
    ks: &Kustomization,
    changes: &ChangeSet,
) -> Vec<WaitTarget> {
    if spec.wait {
        return changes
            .entries
            .iter()
            .filter(|e| e.action != ChangeAction::Skipped)
            .map(|e| {
                let namespace = (!e.object.namespace.is_empty()).then_some(e.object.namespace.as_str());
                WaitTarget::new(&e.api_version, &e.object.kind, namespace, &e.object.name)
            })
            .collect();
    }
    let own_namespace = ks.namespace().unwrap_or_default();
    spec.health_checks
        .iter()
        .map(|check| {
            let namespace = check.namespace.clone().unwrap_or_else(|| own_namespace.clone());
            WaitTarget::new(
                check.api_version.as_deref().unwrap_or("v1"),
                &check.kind,
                Some(&namespace),
                &check.name,
            )
        })
        .collect()
}

fn record_changes(pass: &mut Pass, ctx: &Context, changes: &ChangeSet) {
    for entry in &changes.entries {
        if matches!(
            entry.action,
            ChangeAction::Created | ChangeAction::Configured | ChangeAction::Deleted
        ) {
            pass.changes.push(entry.to_string());
            ctx.metrics.record_action(&entry.action.to_string(), 1);
        }
    }
}

fn source_failure(pass: &mut Pass, error: SourceError, requeue_dependency: Duration) -> StepFailure {
    let message = error.condition_message(requeue_dependency);
    let mut failure = StepFailure::new(error.reason(), message, Duration::ZERO);
    failure.failed.terminal = error.is_terminal();
    // Flux: no event for a missing source or artifact; a Warning for access errors.
    failure.notify = error.is_terminal();
    failure.requeue = error.requeue_after(&pass.ks.spec, requeue_dependency);
    if failure.requeue.is_none() && !error.is_terminal() {
        failure.error = Some(ReconcileError::Source(error));
    }
    status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
    failure
}

fn dependency_failure(pass: &mut Pass, error: DependencyError, requeue_dependency: Duration) -> StepFailure {
    let mut failure = StepFailure::new(
        reason::DEPENDENCY_NOT_READY,
        error.to_string(),
        requeue_dependency,
    );
    let message = format!(
        "Dependencies do not meet ready condition, retrying in {}",
        duration::format(requeue_dependency)
    );
    failure.notice = Some(Notice::info(
        reason::DEPENDENCY_NOT_READY_EVENT,
        message,
        pass.metadata(),
    ));
    status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
    failure
}

fn client_failure(error: ClientError, retry: Duration) -> StepFailure {
    let message = match &error {
        ClientError::Build(_) => error.to_string(),
        other => format!("failed to build kube client: {other}"),
    };
    StepFailure::new(reason::RECONCILIATION_FAILED, message, retry)
}

fn apply_failure(pass: &mut Pass, error: ApplyError, built: &BuiltRevision, retry: Duration) -> StepFailure {
    let mut failure = StepFailure::new(error.reason(), error.to_string(), retry);
    failure.failed.build = Some(BuiltRevision {
        duration: pass.started.elapsed(),
        ..built.clone()
    });
    status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
    failure
}

fn prune_failure(
    pass: &mut Pass,
    ctx: &Context,
    error: PruneError,
    mut inventory: ResourceInventory,
    built: &BuiltRevision,
    retry: Duration,
) -> StepFailure {
    record_changes(pass, ctx, error.changes());
    // Stale objects whose deletion was not confirmed stay in the inventory, to be retried.
    if let PruneError::Delete { pending, .. } = &error {
        inventory.entries.extend(pending.iter().cloned());
    }
    let mut failure = StepFailure::new(error.reason(), error.to_string(), retry);
    failure.failed.build = Some(BuiltRevision {
        duration: pass.started.elapsed(),
        ..built.clone()
    });
    failure.failed.inventory = Some(inventory);
    status::mark_failed(&mut pass.status, &pass.stamp, &failure.failed);
    failure
}

/// The variables of `postBuild`: `substituteFrom` in order (later ones win), then the inline
/// `substitute` over all. Read with the controller's identity; values are never logged.
async fn substitution_vars(client: &Client, ks: &Kustomization) -> Result<BTreeMap<String, String>, String> {
    let Some(post_build) = &ks.spec.post_build else {
        return Ok(BTreeMap::new());
    };
    let namespace = ks.namespace().unwrap_or_default();
    let mut sources = Vec::new();
    for reference in &post_build.substitute_from {
        let (kind, found) = match reference.kind {
            SubstituteKind::ConfigMap => (
                "ConfigMap",
                Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                    .get_opt(&reference.name)
                    .await
                    .map(|cm| {
                        cm.map(|cm| {
                            cm.data
                                .unwrap_or_default()
                                .into_iter()
                                .collect::<BTreeMap<_, _>>()
                        })
                    }),
            ),
            SubstituteKind::Secret => (
                "Secret",
                Api::<Secret>::namespaced(client.clone(), &namespace)
                    .get_opt(&reference.name)
                    .await
                    .map(|secret| {
                        secret.map(|s| {
                            let data = s.data.unwrap_or_default().into_iter();
                            data.map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                                .collect::<BTreeMap<_, _>>()
                        })
                    }),
            ),
        };
        match found {
            Ok(Some(data)) => sources.push(data),
            Ok(None) if reference.optional => {}
            Ok(None) => {
                return Err(format!(
                    "substitute from '{kind}/{}' error: {kind} '{namespace}/{}' not found",
                    reference.name, reference.name
                ));
            }
            Err(error) => {
                return Err(format!(
                    "substitute from '{kind}/{}' error: {error}",
                    reference.name
                ));
            }
        }
    }
    Ok(flux_build::merge_vars(sources, post_build.substitute.as_ref()))
}

/// Writes the status when it differs from the stored one in more than times and counters.
/// Returns whether it wrote.
async fn write_if_changed(ctx: &Context, pass: &Pass) -> Result<bool, ReconcileError> {
    if status::same_ignoring_time(&pass.old, &pass.status) {
        return Ok(false);
    }
    write_status(ctx, &pass.ks, &pass.status).await?;
    Ok(true)
}

/// Server-side apply of the status subresource by `gotk-kustomize-controller`, forced: the
/// controller owns these fields.
pub async fn write_status(
    ctx: &Context,
    ks: &Kustomization,
    status: &KustomizationStatus,
) -> Result<(), ReconcileError> {
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &ks.namespace().unwrap_or_default());
    let body = serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "status": status,
    });
    let params = PatchParams::apply(keys::STATUS_FIELD_MANAGER).force();
    match api
        .patch_status(&ks.name_any(), &params, &Patch::Apply(&body))
        .await
    {
        Ok(_) => Ok(()),
        // Gone while we worked: nothing left to report on.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(ReconcileError::StatusWrite(error)),
    }
}
