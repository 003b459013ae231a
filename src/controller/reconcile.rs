//! The reconcile pipeline driver. It reads like the pipeline:
//!
//! ```text
//! resolve source -> dependsOn -> [progress write] -> fetch -> build (blocking pool)
//!   -> apply -> inventory -> prune -> health -> status (one final write, only if it changed)
//! ```
//!
//! A health wait that the first look at the objects does not decide is parked (see
//! `parked`): the health progress is written, the worker is released, and the run that
//! follows the verdict resumes right after the source is resolved, concluding the pass.
//!
//! Steps that touch the API: resolve, dependsOn, vars, apply, prune, health, status writes and
//! events. Status is computed by the pure `status` module from what the steps returned; events
//! are collected during the pass and emitted at the end, only for real changes.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_runtime::requeue::jittered;
use flux_runtime::telemetry::{ObjectLabels, Outcome, ReconcileResult};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kustomize::{BuildOptions, packed};
use tracing::Instrument;

use crate::api::conditions::{READY, keys, reason};
use crate::api::kustomization::KustomizationStatus;
use crate::api::source::Artifact;
use crate::api::{Kustomization, ResourceInventory, duration};
use crate::applier::handover;
use crate::applier::inventory::{inventory_of, stale};
use crate::applier::{Action as ChangeAction, ApplyRequest, ChangeSet, Owner, PruneError};
use crate::error::{Retry, StepError};
use crate::flux;
use crate::health::{self, HealthCheckFailed, HealthError};
use crate::sops;
use crate::source::{SourceAccess, SourceError, get_artifact_cached, resolve_path};

use super::dependencies::{DependencyError, check_dependencies};
use super::events::{self, Notice};
use super::pacing::{PROGRESS_DELAY, build_within, progress_after};
use super::parked::{Resume, Settled, Started, Waited, Work};
use super::status::{self, Applied, BuiltRevision, Failed, Progress, Stamp};
use super::vars::substitution_vars;
use super::{Context, IDENTITY, finalize, write_status};

/// Errors that leave the driver as errors: `error_policy` waits for a change of the object
/// after a terminal one and backs off after the others.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A step error classified terminal, or transient with backoff.
    #[error("{0}")]
    Step(Box<dyn StepError>),
    #[error("{0}")]
    Finalize(#[from] finalize::FinalizeError),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Step(error) => error.is_terminal(),
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
pub(crate) async fn reconcile(ks: Arc<Kustomization>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let namespace = ks.namespace().unwrap_or_default();
    let name = ks.name_any();
    let key = super::object_key(&ks);
    let span = flux_runtime::telemetry::logs::reconcile_span(&IDENTITY, &namespace, &name);
    let labels = ObjectLabels {
        kind: "Kustomization".into(),
        name: name.clone(),
        namespace: namespace.clone(),
    };
    let worker = ctx.metrics.runtime.start();
    // The reconcile duration covers the whole pass, apply and health wait, as Flux's does: a
    // run that parks a pass records nothing, the run that concludes it records from its start.
    let began = Mutex::new(Some(Instant::now()));
    let api: Api<Kustomization> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, keys::FINALIZER, ks, |event| async {
        match event {
            FinalizerEvent::Apply(ks) => reconcile_apply(ks, &ctx, &began).await,
            FinalizerEvent::Cleanup(ks) => {
                ctx.waits.cancel(&key);
                ctx.own_writes.forget(&key);
                finalize::cleanup(&ks, &ctx)
                    .await
                    .map(|()| Action::await_change())
                    .map_err(ReconcileError::from)
            }
        }
    })
    .instrument(span)
    .await;
    let result = match result {
        Err(error) if stale_finalizer_view(&error) => {
            tracing::debug!(%error, "the finalizers changed since this view of the object; the watch event of that change runs the next pass");
            Ok(Action::await_change())
        }
        other => other.map_err(|e| ReconcileError::Finalizer(Box::new(e))),
    };
    let result_label = match &result {
        // A pass that returns no error ends the backoff; `error_policy` counts the failures.
        Ok(_) => {
            ctx.failure_count(&key, false);
            ReconcileResult::Success
        }
        Err(_) => ReconcileResult::Failure,
    };
    if let Some(began) = began.into_inner().expect("pass start lock") {
        ctx.metrics
            .record_reconcile(&labels, began.elapsed(), result_label);
    }
    worker.finish(match &result {
        Err(_) => Outcome::Error,
        Ok(action) if *action == Action::await_change() => Outcome::Success,
        Ok(_) => Outcome::RequeueAfter,
    });
    result
}

/// The finalizer patch tests the finalizers it read, so a 422 means the object changed since
/// (typically a pass triggered by a source event, run from a cache that has not yet seen the
/// finalizer the pass before it added). That change has a watch event of its own, which runs the
/// next pass: not a failure to back off from.
fn stale_finalizer_view(error: &kube::runtime::finalizer::Error<ReconcileError>) -> bool {
    use kube::runtime::finalizer::Error;
    matches!(
        error,
        Error::AddFinalizer(kube::Error::Api(status)) | Error::RemoveFinalizer(kube::Error::Api(status))
            if status.code == 422
    )
}

/// A step that failed, with what the status and the requeue should say.
struct StepFailure {
    failed: Failed,
    /// `Some(d)`: requeue after `d` (Flux's "nil error" requeues). `None`: return `error`.
    requeue: Option<Duration>,
    /// Announced with a Warning event.
    warns: bool,
    /// A Normal event instead of the Warning (dependencies not ready).
    notice: Option<Notice>,
    error: Option<ReconcileError>,
}

/// What one pass did, threaded through the steps. A parked pass is kept whole until the run
/// that concludes it.
#[derive(Clone)]
pub(crate) struct Pass {
    ks: Arc<Kustomization>,
    old: KustomizationStatus,
    status: KustomizationStatus,
    stamp: Stamp,
    revision: Option<String>,
    origin_revision: Option<String>,
    started: Instant,
    /// `--requeue-dependency`.
    requeue_dependency: Duration,
    /// Change-set event lines collected from apply and prune.
    changes: Vec<String>,
    /// The status last written during the pass, when one was: what the final write compares
    /// against (`old` stays the status before the pass, for events and transition times).
    written: Option<KustomizationStatus>,
    /// What the health checks conclude: set once the apply and prune are done.
    rollout: Option<Rollout>,
}

/// What the end of a pass needs from its apply: the build, for the history, and the new
/// inventory.
#[derive(Clone)]
struct Rollout {
    built: BuiltRevision,
    inventory: ResourceInventory,
    /// The Ready message's line naming drift left in place (`drift: warn`).
    drift: Option<String>,
}

/// How the pipeline left a pass.
enum Flow {
    /// Concluded: the final status is computed.
    Concluded,
    /// Waiting for health, off the worker: the status says so already.
    Parked,
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

    /// A step failed: Ready=False (Stalled for a terminal error) from the error's own
    /// classification.
    fn fail<E: StepError>(&mut self, error: E) -> StepFailure {
        self.fail_with(error, |_| ())
    }

    /// [`Pass::fail`], where `amend` adds what the step knows beyond the error (history,
    /// inventory, health).
    fn fail_with<E: StepError>(&mut self, error: E, amend: impl FnOnce(&mut Failed)) -> StepFailure {
        let retry = error.retry();
        let mut failed = Failed {
            reason: error.reason(),
            message: error.condition_message(self.requeue_dependency),
            terminal: retry == Retry::Terminal,
            build: None,
            inventory: None,
            unhealthy: None,
        };
        amend(&mut failed);
        status::mark_failed(&mut self.status, &self.stamp, &failed);
        let requeue = match retry {
            Retry::RetryInterval => Some(self.ks.spec.retry_interval()),
            Retry::Dependency => Some(self.requeue_dependency),
            Retry::Terminal | Retry::Backoff => None,
        };
        StepFailure {
            failed,
            requeue,
            warns: error.warns(),
            notice: None,
            error: requeue.is_none().then(|| ReconcileError::Step(Box::new(error))),
        }
    }

    /// The build that was applied (or tried), for the history of a later failure.
    fn built(&self, built: &BuiltRevision) -> BuiltRevision {
        BuiltRevision {
            duration: self.started.elapsed(),
            ..built.clone()
        }
    }
}

async fn reconcile_apply(
    ks: Arc<Kustomization>,
    ctx: &Context,
    began: &Mutex<Option<Instant>>,
) -> Result<Action, ReconcileError> {
    let old = ctx
        .own_writes
        .ahead_of(&super::object_key(&ks), &ks)
        .or_else(|| ks.status.clone())
        .unwrap_or_default();
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
        requeue_dependency: ctx.options.requeue_dependency,
        changes: Vec::new(),
        written: None,
        rollout: None,
    };

    if ks.spec.suspend {
        ctx.waits.cancel(&super::object_key(&ks));
        tracing::info!("reconciliation is suspended for this object");
        status::finalize_status(&mut pass.status, &pass.stamp, requested_at.as_deref());
        write_if_changed(ctx, &pass).await?;
        return Ok(Action::await_change());
    }

    let outcome = match run_pipeline(&mut pass, ctx).await {
        Ok(Flow::Parked) => {
            *began.lock().expect("pass start lock") = None;
            emit_changes(ctx, &pass);
            return Ok(Action::await_change());
        }
        Ok(Flow::Concluded) => Ok(()),
        Err(failure) => Err(failure),
    };
    *began.lock().expect("pass start lock") = Some(pass.started);
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
    emit_changes(ctx, &pass);
    let metadata = pass.metadata();
    // drift: warn: a new set of drifted objects left in place
    if written && let Some(notice) = super::drift::notice(&pass.old, &pass.status, metadata.clone()) {
        ctx.notifier.emit(&ks, &notice);
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
                ctx.notifier.emit(
                    &ks,
                    &Notice::info(reason::RECONCILIATION_SUCCEEDED, message, metadata),
                );
            }
            let random: f64 = rand::random();
            Ok(Action::requeue(jittered(
                ks.spec.interval(),
                ctx.options.runtime.interval_jitter_percentage,
                random,
            )))
        }
        Err(failure) => {
            let elapsed = duration::format(pass.started.elapsed());
            let failed = match failure.requeue {
                Some(after) => format!(
                    "Reconciliation failed after {elapsed}, next try in {}",
                    duration::format(after)
                ),
                None => format!("Reconciliation failed after {elapsed}"),
            };
            tracing::error!(error = %failure.failed.message, reason = failure.failed.reason, "{failed}");
            if ready_changed(&pass.old, &pass.status) {
                if let Some(notice) = failure.notice {
                    ctx.notifier.emit(&ks, &notice);
                } else if failure.warns {
                    let notice =
                        Notice::error(failure.failed.reason, failure.failed.message.clone(), metadata);
                    ctx.notifier.emit(&ks, &notice);
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

/// The change-set lines of the pass, as one event, when there are any: they are changes.
fn emit_changes(ctx: &Context, pass: &Pass) {
    if !pass.changes.is_empty() {
        let notice = Notice::info(reason::PROGRESSING, pass.changes.join("\n"), pass.metadata());
        ctx.notifier.emit(&pass.ks, &notice);
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

async fn run_pipeline(pass: &mut Pass, ctx: &Context) -> Result<Flow, StepFailure> {
    let ks = pass.ks.clone();
    let spec = &ks.spec;

    // Health expressions are configuration: check them before doing any work.
    let exprs = Arc::new(
        health::cel::compile(&spec.health_check_exprs)
            .await
            .map_err(|e| pass.fail(e))?,
    );

    // Resolve the source and its artifact.
    let access = SourceAccess {
        no_cross_namespace_refs: ctx.options.no_cross_namespace_refs,
        external_artifact: ctx.options.feature_gates.external_artifact,
    };
    let resolved = get_artifact_cached(&ctx.client, &ks, access, &ctx.sources)
        .await
        .map_err(|e| pass.fail(e))?;
    let artifact = resolved.artifact;
    pass.revision = Some(artifact.revision.clone());
    pass.origin_revision = artifact.origin_revision().map(str::to_string);
    tracing::Span::current().record("revision", artifact.revision.as_str());

    // A parked health wait for this very work: conclude it once it has a verdict. For other
    // work (a new revision, generation or reconcile request) it is dropped and the pass runs.
    let key = super::object_key(&ks);
    let work = Work {
        generation: pass.stamp.generation,
        revision: artifact.revision.clone(),
        requested_at: ks.annotations().get(keys::REQUESTED_AT_ANNOTATION).cloned(),
    };
    match ctx.waits.resume(&key, &work) {
        Resume::Idle => {}
        Resume::Waiting => return Ok(Flow::Parked),
        Resume::Finished(parked, waited) => {
            *pass = parked;
            return conclude(pass, Some(waited)).map_or(Ok(Flow::Concluded), Err);
        }
    }

    // dependsOn.
    if !spec.depends_on.is_empty() {
        check_dependencies(&ctx.client, &ks, &artifact.revision)
            .await
            .map_err(|e| dependency_failure(pass, e))?;
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
    let progress = new_work.then(|| {
        let (status, ks) = (pass.status.clone(), ks.clone());
        async move { write_status(ctx, &ks, &status).await.map(|()| status) }
    });
    let (rolled_out, progress) =
        progress_after(PROGRESS_DELAY, progress, roll_out(pass, ctx, &artifact, exprs)).await;
    match progress {
        Some(Ok(status)) => pass.written = Some(status),
        // The pass's next write tells the outcome.
        Some(Err(error)) => tracing::info!(%error, "progress status not written"),
        None => {}
    }
    let started = match rolled_out? {
        RolledOut::Concluded => return Ok(Flow::Concluded),
        RolledOut::Waiting(started) => started,
    };
    // A rollout to wait for: say so as Flux does, with the new inventory (a deletion
    // meanwhile prunes what this pass applied), and give the worker back.
    let inventory = pass.rollout.as_ref().map(|r| r.inventory.clone());
    status::mark_health_checks(
        &mut pass.status,
        &pass.stamp,
        &work.revision,
        spec.timeout(),
        inventory,
    );
    status::keep_transition_times(&pass.old, &mut pass.status);
    write_status(ctx, &ks, &pass.status)
        .await
        .map_err(|e| pass.fail(e))?;
    pass.written = Some(pass.status.clone());
    let parked = Pass {
        changes: Vec::new(),
        ..pass.clone()
    };
    ctx.waits.park(&key, work, parked, started);
    Ok(Flow::Parked)
}

/// How the apply left a pass that did not fail.
enum RolledOut {
    /// Concluded: the final status is computed.
    Concluded,
    /// Its objects are rolling out: a wait to park.
    Waiting(Started),
}

/// The pass from the artifact to the health verdict: fetch, build, apply, prune, and the health
/// wait when the first look at the objects decides it.
async fn roll_out(
    pass: &mut Pass,
    ctx: &Context,
    artifact: &Artifact,
    exprs: Arc<health::cel::HealthExprs>,
) -> Result<RolledOut, StepFailure> {
    let ks = pass.ks.clone();
    let spec = &ks.spec;
    let fetched = ctx.fetcher.fetch(artifact).await;
    let download_failed = matches!(fetched, Err(SourceError::Download { .. }));
    let download_retry = ctx.download_retry(&super::object_key(&pass.ks), download_failed);
    let tree = fetched.map_err(|e| {
        let mut failure = pass.fail(e);
        if let Some(after) = download_retry {
            tracing::info!(retry_in = %duration::format(after), "artifact download failed, retrying");
            failure.requeue = Some(after);
            failure.error = None;
        }
        failure
    })?;
    let dir = resolve_path(tree.root(), spec.path.as_deref()).map_err(|e| pass.fail(e))?;
    pass.status.last_attempted_revision = Some(artifact.revision.clone());
    pass.step(Progress::Building);

    // Who applies: the controller, an impersonated ServiceAccount or a remote cluster.
    let tools = ctx
        .identities
        .for_kustomization(&ks)
        .await
        .map_err(|e| pass.fail(e))?;

    // Build (CPU-bound: off the async workers).
    let vars = substitution_vars(&ctx.client, &ks)
        .await
        .map_err(|e| pass.fail(e))?;
    // SOPS keys from spec.decryption's Secret.
    let age_secret = (ctx.options.sops_age_secret.as_deref())
        .map(|name| (ctx.options.runtime.runtime_namespace.as_str(), name));
    let keys = sops::secret::load_keys(&ctx.client, &ks, age_secret)
        .await
        .map_err(|e| pass.fail(e))?;
    let (root, build_spec) = (tree.root().to_path_buf(), spec.clone());
    let remote = ctx.remote.clone();
    let strict = ctx.options.feature_gates.strict_post_build_substitutions;
    let timeout = spec.timeout();
    let budget = timeout.saturating_sub(pass.started.elapsed());
    let built = build_within(budget, timeout, move || {
        let options = BuildOptions::new().with_remote(remote);
        flux::build_decrypting(&root, &dir, &build_spec, &vars, &options, strict, keys.as_ref())
    })
    .await
    .map_err(|e| pass.fail(e))?
    .map_err(|e| pass.fail(e))?;
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

    // Apply: never a Secret still SOPS-encrypted.
    let objects = packed::values(&built.objects);
    if let Some(refusal) = sops::refusal(&objects) {
        return Err(pass.fail(sops::Refused(refusal)));
    }
    // Objects Current once their write returns: the health wait needs no watch of them.
    let current_as_applied: HashSet<crate::api::inventory::ObjectRef> = objects
        .iter()
        .filter(|o| health::current_as_applied(o))
        .map(crate::api::inventory::ObjectRef::of)
        .collect();
    let owner = Owner::new(&ks.name_any(), &ks.namespace().unwrap_or_default());
    let request = ApplyRequest {
        owner: owner.clone(),
        objects,
        force: spec.force,
        ignore: &spec.ignore,
        revision: &artifact.revision,
    };
    let policy = super::drift::policy(&ks, &pass.old, &built.digest);
    let applied_changes = tools.applier.apply_with(request, policy).await;
    pass.stamp.now = Timestamp::now();
    let (changes, drifted) = applied_changes.map_err(|error| {
        let build = pass.built(&built_revision);
        let masked = sops::Masked {
            error,
            secrets: built.masks.clone(),
        };
        pass.fail_with(masked, |f| f.build = Some(build))
    })?;
    record_changes(pass, ctx, &changes);

    // Inventory and prune.
    let previous = pass.old.inventory.clone().unwrap_or_default();
    let mut inventory = inventory_of(&changes);
    let stale_entries = stale(&previous, &inventory);
    let behind = if spec.prune && !stale_entries.is_empty() {
        siblings_behind(ctx, &ks, &artifact.revision).await
    } else {
        Vec::new()
    };
    if !behind.is_empty() {
        // A sibling may still take over what this revision dropped: release, do not delete.
        tracing::info!(
            siblings = %behind.join(", "),
            "stale objects released, not deleted, until the siblings of this source apply this revision"
        );
        inventory
            .entries
            .extend(tools.applier.release(&owner, &stale_entries).await);
    } else if spec.prune && !stale_entries.is_empty() {
        match tools.applier.prune(&owner, &stale_entries).await {
            Ok(pruned) => record_changes(pass, ctx, &pruned),
            Err(error) => {
                record_changes(pass, ctx, error.changes());
                // Stale objects whose deletion was not confirmed stay in the inventory, to be retried.
                if let PruneError::Delete { pending, .. } = &error {
                    inventory.entries.extend(pending.iter().cloned());
                }
                let build = pass.built(&built_revision);
                return Err(pass.fail_with(error, |f| {
                    f.build = Some(build);
                    f.inventory = Some(inventory);
                }));
            }
        }
    }

    // Health. A workload this pass created or reconfigured is still rolling out: the wait
    // parks at once instead of holding the worker for a first look at the objects.
    let rolling_out = changes.entries.iter().any(|e| {
        matches!(e.action, ChangeAction::Created | ChangeAction::Configured)
            && health::rolls_out(&e.api_version, &e.object.kind)
    });
    let applied = changes
        .entries
        .iter()
        .filter(|e| e.action != ChangeAction::Skipped)
        .map(|e| {
            (
                e.api_version.as_str(),
                &e.object,
                current_as_applied.contains(&e.object),
            )
        });
    let targets = health::wait_targets(&ks, applied);
    pass.rollout = Some(Rollout {
        built: built_revision,
        inventory,
        drift: super::drift::ready_line(&drifted),
    });
    if targets.is_empty() {
        return conclude(pass, None).map_or(Ok(RolledOut::Concluded), Err);
    }
    pass.step(Progress::HealthChecks);
    let (watches, timeout) = (tools.health.clone(), spec.timeout());
    let started = ctx
        .waits
        .start(ObjectRef::from_obj(ks.as_ref()), |undecided| async move {
            health::wait_signalling(&watches, &targets, &exprs, timeout, undecided).await
        });
    let settled = if rolling_out {
        Settled::Undecided(started)
    } else {
        started.settle().await
    };
    match settled {
        Settled::Done(waited) => conclude(pass, Some(waited)).map_or(Ok(RolledOut::Concluded), Err),
        Settled::Undecided(started) => Ok(RolledOut::Waiting(started)),
    }
}

/// The end of the pass after its apply: the health verdict (`None` when nothing is checked)
/// decides between Ready=True and HealthCheckFailed (returned). One rule for a wait that
/// ended on the worker and one that was parked.
fn conclude(pass: &mut Pass, waited: Option<Waited>) -> Option<StepFailure> {
    let Rollout {
        built,
        inventory,
        drift,
    } = pass.rollout.take().expect("concluded after the apply");
    pass.stamp.now = Timestamp::now();
    let health = match waited {
        None => None,
        Some(Waited {
            verdict: Err(error),
            elapsed,
        }) => {
            let build = pass.built(&built);
            let amend = |f: &mut Failed| {
                f.build = Some(build);
                f.inventory = Some(inventory);
            };
            if matches!(error, HealthError::Canceled) {
                return Some(pass.fail_with(error, amend));
            }
            let unhealthy = error.to_string();
            let failed = HealthCheckFailed { elapsed, error };
            return Some(pass.fail_with(failed, |f| {
                amend(f);
                f.unhealthy = Some(unhealthy);
            }));
        }
        Some(Waited { elapsed, .. }) => Some(elapsed),
    };
    let applied = Applied {
        revision: built.revision,
        origin_revision: pass.origin_revision.clone(),
        inventory,
        digest: built.digest,
        health,
        duration: pass.started.elapsed(),
        drift,
    };
    status::mark_applied(&mut pass.status, &pass.stamp, &applied);
    None
}

/// The Kustomizations of `ks`'s namespace and source that have not applied `revision` yet
/// (read with the controller's identity, as dependsOn is). A failed list counts as one behind:
/// deleting is what cannot be undone.
async fn siblings_behind(ctx: &Context, ks: &Kustomization, revision: &str) -> Vec<String> {
    let api = Api::<Kustomization>::namespaced(ctx.client.clone(), &ks.namespace().unwrap_or_default());
    match api.list(&Default::default()).await {
        Ok(list) => handover::lagging_siblings(ks, &list.items, revision),
        Err(error) => vec![format!("(Kustomizations not listed: {error})")],
    }
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

/// Dependencies not ready are announced with a Normal event that says when the next try is.
fn dependency_failure(pass: &mut Pass, error: DependencyError) -> StepFailure {
    let terminal = error.is_terminal();
    let mut failure = pass.fail(error);
    if !terminal {
        let message = format!(
            "Dependencies do not meet ready condition, retrying in {}",
            duration::format(pass.requeue_dependency)
        );
        failure.notice = Some(Notice::info(
            reason::DEPENDENCY_NOT_READY_EVENT,
            message,
            pass.metadata(),
        ));
    }
    failure
}

/// Writes the status when it differs from the stored one in more than times and counters.
/// Returns whether it wrote.
async fn write_if_changed(ctx: &Context, pass: &Pass) -> Result<bool, ReconcileError> {
    let stored = pass.written.as_ref().unwrap_or(&pass.old);
    if status::same_ignoring_time(stored, &pass.status) {
        return Ok(false);
    }
    write_status(ctx, &pass.ks, &pass.status)
        .await
        .map_err(|e| ReconcileError::Step(Box::new(e)))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube::runtime::finalizer::Error;

    use super::stale_finalizer_view;

    #[test]
    fn only_a_failed_finalizer_test_is_a_stale_view() {
        let api =
            |code: u16| kube::Error::Api(Box::new(Status::failure("rejected", "Invalid").with_code(code)));
        assert!(stale_finalizer_view(&Error::AddFinalizer(api(422))));
        assert!(stale_finalizer_view(&Error::RemoveFinalizer(api(422))));
        assert!(
            !stale_finalizer_view(&Error::AddFinalizer(api(500))),
            "a server error is retried"
        );
        assert!(
            !stale_finalizer_view(&Error::AddFinalizer(api(403))),
            "a forbidden patch is retried"
        );
    }
}
