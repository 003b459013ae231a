//! The steps of the pipeline, one function each. A step's own error becomes a [`StepFailure`]
//! by the error's classification (`Pass::fail`); what a step knows beyond its error (the build
//! for the history, the inventory to keep) goes with it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kustomize::{BuildOptions, packed};

use crate::api::conditions::{HEALTHY, reason};
use crate::api::inventory::ObjectRef as InventoryRef;
use crate::api::kustomization::KustomizationStatus;
use crate::api::source::Artifact;
use crate::api::{Kustomization, ResourceInventory, duration};
use crate::applier::handover;
use crate::applier::inventory::{inventory_of, stale};
use crate::applier::{Action as ChangeAction, ApplyRequest, ChangeSet, DriftReport, Owner, PruneError};
use crate::error::StepError;
use crate::flux::{self, Built};
use crate::health::cel::HealthExprs;
use crate::health::{self, HealthCheckFailed, HealthError};
use crate::sops;
use crate::source::{
    ArtifactTree, SourceAccess, SourceError, get_artifact, get_artifact_cached, resolve_path,
};

use super::pass::{Pass, Reached, Rollout, StepFailure};
use crate::controller::dependencies::{DependencyError, check_dependencies};
use crate::controller::events::{self, action};
use crate::controller::identity::Tools;
use crate::controller::pacing::build_within;
use crate::controller::parked::{Settled, Waited};
use crate::controller::status::{self, Applied, BuiltRevision, Failed, Progress};
use crate::controller::substitute_from::substitution_vars;
use crate::controller::{Context, drift_mode, object_key};
use crate::deadline::Deadline;

/// What the apply did.
pub(crate) struct ApplyReport {
    pub owner: Owner,
    /// Something was created or configured.
    pub changed: bool,
    pub changes: ChangeSet,
    /// Drift left in place (`drift: warn`).
    pub drifted: Vec<DriftReport>,
    /// Objects Current once their write returns: the health wait needs no watch of them.
    current_as_applied: HashSet<InventoryRef>,
}

/// Health expressions are configuration: checked before any work.
pub(super) async fn health_exprs(pass: &Pass) -> Result<Arc<HealthExprs>, StepFailure> {
    let exprs = health::cel::compile(&pass.ks.spec.health_check_exprs)
        .await
        .map_err(|e| pass.fail(e))?;
    Ok(Arc::new(exprs))
}

/// The source and its artifact, from the source caches (from the API server with Flux's
/// DirectSourceFetch gate).
pub(super) async fn resolve(pass: &mut Pass, ctx: &Context) -> Result<Artifact, StepFailure> {
    let access = SourceAccess {
        no_cross_namespace_refs: ctx.options.no_cross_namespace_refs,
        external_artifact: ctx.options.feature_gates.external_artifact,
    };
    let resolved = if ctx.options.feature_gates.direct_source_fetch {
        get_artifact(&ctx.client, &pass.ks, access).await
    } else {
        get_artifact_cached(&ctx.client, &pass.ks, access, &ctx.sources).await
    };
    let resolved = resolved.map_err(|e| pass.fail(e))?;
    pass.source = Some(events::source_reference(&resolved));
    let artifact = resolved.artifact;
    pass.revision = Some(artifact.revision.clone());
    pass.origin_revision = artifact.origin_revision().map(str::to_string);
    tracing::Span::current().record("revision", artifact.revision.as_str());
    Ok(artifact)
}

/// dependsOn: every dependency ready, at this revision where they share the source.
pub(super) async fn depends_on(pass: &Pass, ctx: &Context, artifact: &Artifact) -> Result<(), StepFailure> {
    if pass.ks.spec.depends_on.is_empty() {
        return Ok(());
    }
    let additive = ctx.options.feature_gates.additive_cel_dependency_check;
    check_dependencies(&ctx.client, &pass.ks, &artifact.revision, additive)
        .await
        .map_err(|e| dependency_failure(pass, e))
}

/// Dependencies not ready are announced, on every try as Flux does, with a Normal event that
/// says when the next try is.
fn dependency_failure(pass: &Pass, error: DependencyError) -> StepFailure {
    let terminal = error.is_terminal();
    let mut failure = pass.fail(error);
    if !terminal {
        let message = format!(
            "Dependencies do not meet ready condition, retrying in {}",
            duration::format(pass.requeue_dependency)
        );
        let notice = pass.info(
            reason::DEPENDENCY_NOT_READY_EVENT,
            action::CHECK_DEPENDENCIES,
            message,
        );
        failure.notice = Some(Box::new(notice));
    }
    failure
}

/// The artifact, verified and extracted (or from the cache), and the directory to build in it.
/// A failed download is retried soon while `--http-retry` allows, off the worker.
pub(super) async fn fetch(
    pass: &Pass,
    ctx: &Context,
    artifact: &Artifact,
) -> Result<(ArtifactTree, PathBuf), StepFailure> {
    let fetched = ctx.fetcher.fetch(artifact).await;
    let download_failed = matches!(fetched, Err(SourceError::Download { .. }));
    let download_retry = ctx.download_retry(&object_key(&pass.ks), download_failed);
    let tree = fetched.map_err(|e| {
        let mut failure = pass.fail(e);
        if let Some(after) = download_retry {
            tracing::info!(retry_in = %duration::format(after), "artifact download failed, retrying");
            failure.requeue = Some(after);
            failure.error = None;
        }
        failure
    })?;
    let dir = resolve_path(tree.root(), pass.ks.spec.path.as_deref()).map_err(|e| pass.fail(e))?;
    Ok((tree, dir))
}

/// The manifests of `dir`: postBuild variables and SOPS keys read, then built and decrypted on
/// the blocking pool (CPU-bound) within what is left of spec.timeout. Returns the build and
/// what identifies it in the history.
pub(super) async fn build(
    pass: &Pass,
    ctx: &Context,
    tree: ArtifactTree,
    dir: PathBuf,
    artifact: &Artifact,
) -> Result<(Built, BuiltRevision), StepFailure> {
    let (ks, spec) = (&pass.ks, &pass.ks.spec);
    let substitution = substitution_vars(&ctx.client, ks)
        .await
        .map_err(|e| pass.fail(e))?;
    let vars = substitution.vars;
    // SOPS keys from spec.decryption's Secret.
    let age_secret = (ctx.options.sops_age_secret.as_deref())
        .map(|name| (ctx.options.runtime.runtime_namespace.as_str(), name));
    let keys = sops::secret::load_keys(&ctx.client, ks, age_secret)
        .await
        .map_err(|e| pass.fail(e))?;
    let (root, build_spec) = (tree.root().to_path_buf(), spec.clone());
    // spec.timeout from the start of the pass bounds the build, its remote fetches included;
    // shutdown ends it sooner.
    let deadline = Deadline::from(pass.started, spec.timeout()).or_shutdown(&ctx.shutdown);
    let remote = ctx.remote.until(deadline.clone());
    let strict = ctx.options.feature_gates.strict_post_build_substitutions;
    let key = object_key(ks);
    let (span, shutdown) = (tracing::Span::current(), ctx.shutdown.clone());
    let mut built = build_within(&ctx.builds, &key, deadline.clone(), move || {
        let options = BuildOptions::new().with_remote(remote);
        let keys = keys.as_ref();
        let built = flux::build_decrypting(&root, &dir, &build_spec, &vars, &options, strict, keys, deadline);
        // The pass canceled at shutdown is gone: the build tells how it ended.
        if let Err(error) = &built
            && shutdown.is_cancelled()
        {
            span.in_scope(|| tracing::info!(%error, "build stopped"));
        }
        built
    })
    .await
    .map_err(|e| pass.fail(e))?
    .map_err(|e| pass.fail(e))?;
    drop(tree);
    // Masked in apply errors with the decrypted values.
    built.masks.extend(substitution.secret_values);
    // Said once per revision: the interval's rebuilds of the same input would repeat it.
    if pass.old.last_applied_revision.as_deref() != Some(artifact.revision.as_str()) {
        for warning in &built.warnings {
            tracing::warn!("build warning: {warning}");
        }
    }
    let revision = BuiltRevision {
        digest: built.digest.clone(),
        revision: artifact.revision.clone(),
        origin_revision: pass.origin_revision.clone(),
        duration: Duration::ZERO,
    };
    Ok((built, revision))
}

/// Apply: never a Secret still SOPS-encrypted; in stages, only what drifted (or, with
/// `drift: warn`, reporting drift instead of correcting it).
pub(super) async fn apply(
    pass: &mut Pass,
    ctx: &Context,
    tools: &Tools,
    built: &Built,
    revision: &BuiltRevision,
) -> Result<ApplyReport, StepFailure> {
    let ks = pass.ks.clone();
    let objects = packed::values(&built.objects);
    if let Some(refusal) = sops::refusal(&objects) {
        return Err(pass.fail(sops::Refused(refusal)));
    }
    let current_as_applied: HashSet<InventoryRef> = objects
        .iter()
        .filter(|o| health::current_as_applied(o))
        .map(InventoryRef::of)
        .collect();
    let owner = Owner::new(&ks.name_any(), &ks.namespace().unwrap_or_default());
    let request = ApplyRequest {
        owner: owner.clone(),
        objects,
        force: ks.spec.force,
        ignore: &ks.spec.ignore,
        revision: &revision.revision,
    };
    let policy = drift_mode::policy(&ks, &pass.old, &built.digest);
    let applied = tools.applier.apply_with(request, policy).await;
    pass.stamp.now = Timestamp::now();
    let (changes, drifted) = applied.map_err(|error| {
        let build = pass.built(revision);
        let masked = sops::Masked {
            error,
            secrets: built.masks.clone(),
        };
        pass.fail_with(masked, |f| f.build = Some(build))
    })?;
    if !changes.is_empty() {
        let output = changes.log_output(ctx.options.feature_gates.group_change_log);
        tracing::info!(%output, "server-side apply completed");
    }
    let lines = changed_lines(ctx, &changes);
    // Flux's apply event: the objects created or configured, when there are any.
    if !lines.is_empty() {
        let notice = pass.info(reason::PROGRESSING, action::APPLY, lines.join("\n"));
        pass.events.push(notice);
    }
    Ok(ApplyReport {
        changed: !lines.is_empty(),
        owner,
        changes,
        drifted,
        current_as_applied,
    })
}

/// Inventory and prune: the new inventory from the change set; what the old one lists and the
/// new one does not is deleted (with spec.prune), or released while a sibling of the same
/// source may still take it over.
pub(super) async fn prune(
    pass: &mut Pass,
    ctx: &Context,
    tools: &Tools,
    applied: &ApplyReport,
    revision: &BuiltRevision,
) -> Result<ResourceInventory, StepFailure> {
    let previous = pass.old.inventory.clone().unwrap_or_default();
    let mut inventory = inventory_of(&applied.changes);
    let stale_entries = stale(&previous, &inventory);
    if !pass.ks.spec.prune || stale_entries.is_empty() {
        return Ok(inventory);
    }
    let behind = siblings_behind(ctx, &pass.ks, &revision.revision).await;
    if !behind.is_empty() {
        // A sibling may still take over what this revision dropped: release, do not delete.
        tracing::info!(
            siblings = %behind.join(", "),
            "stale objects released, not deleted, until the siblings of this source apply this revision"
        );
        let released = tools.applier.release(&applied.owner, &stale_entries).await;
        inventory.entries.extend(released);
        return Ok(inventory);
    }
    match tools.applier.prune(&applied.owner, &stale_entries).await {
        Ok(pruned) => {
            changed_lines(ctx, &pruned);
            // Flux's prune event: every entry of the prune's change set, in its own event.
            if !pruned.entries.is_empty() {
                let lines: Vec<String> = pruned.entries.iter().map(ToString::to_string).collect();
                let notice = pass.info(reason::PROGRESSING, action::PRUNE, lines.join("\n"));
                pass.events.push(notice);
            }
            Ok(inventory)
        }
        Err(error) => {
            // The failure's own event tells what was deleted before it.
            changed_lines(ctx, error.changes());
            // Stale objects whose deletion was not confirmed stay in the inventory, to be retried.
            if let PruneError::Delete { pending, .. } = &error {
                inventory.entries.extend(pending.iter().cloned());
            }
            let build = pass.built(revision);
            Err(pass.fail_with(error, |f| {
                f.build = Some(build);
                f.inventory = Some(inventory);
            }))
        }
    }
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

/// Health: the wait for what was applied (`wait`) or named (`healthChecks`), decided on the
/// worker when the first look at the objects decides it. A workload this pass created or
/// reconfigured is still rolling out: its wait is parked at once instead of holding the worker
/// for a first look at the objects.
pub(super) async fn check_health(
    pass: &mut Pass,
    ctx: &Context,
    tools: &Tools,
    applied: ApplyReport,
    rollout: Rollout,
    exprs: Arc<HealthExprs>,
) -> Reached {
    let ks = pass.ks.clone();
    let rolling_out = applied.changes.entries.iter().any(|e| {
        matches!(e.action, ChangeAction::Created | ChangeAction::Configured)
            && health::rolls_out(&e.api_version, &e.object.kind)
    });
    let checked = applied
        .changes
        .entries
        .iter()
        .filter(|e| e.action != ChangeAction::Skipped)
        .map(|e| {
            (
                e.api_version.as_str(),
                &e.object,
                applied.current_as_applied.contains(&e.object),
            )
        });
    let Some(targets) = health::wait_targets(&ks, checked) else {
        return Reached::Verdict(rollout, None);
    };
    if targets.is_empty() {
        // Checked, with nothing left to wait for (the Kustomization itself): passed at once.
        let passed = Waited {
            verdict: Ok(health::Report { objects: Vec::new() }),
            elapsed: Duration::ZERO,
        };
        return Reached::Verdict(rollout, Some(passed));
    }
    pass.enter(Progress::HealthChecks);
    let (watches, timeout) = (tools.health.clone(), ks.spec.timeout());
    let fail_fast = !ctx.options.feature_gates.disable_fail_fast_behavior;
    let started = ctx
        .waits
        .start(ObjectRef::from_obj(ks.as_ref()), |undecided| async move {
            health::wait_signalling(&watches, &targets, &exprs, timeout, fail_fast, undecided).await
        });
    let settled = if rolling_out {
        Settled::Undecided(started)
    } else {
        started.settle().await
    };
    match settled {
        Settled::Done(waited) => Reached::Verdict(rollout, Some(waited)),
        Settled::Undecided(started) => Reached::RollingOut(rollout, started),
    }
}

/// The health verdict (`None` when nothing is checked) decides between the revision applied
/// and HealthCheckFailed: one rule for a wait decided on the worker and one that was parked.
pub(super) fn verdict(
    pass: &mut Pass,
    rollout: Rollout,
    waited: Option<Waited>,
) -> Result<Applied, StepFailure> {
    let Rollout {
        built,
        inventory,
        changed,
        drift,
    } = rollout;
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
                return Err(pass.fail_with(error, amend));
            }
            let unhealthy = error.to_string();
            let failed = HealthCheckFailed { elapsed, error };
            return Err(pass.fail_with(failed, |f| {
                amend(f);
                f.unhealthy = Some(unhealthy);
            }));
        }
        Some(Waited { elapsed, .. }) => {
            if announces_health(&pass.old, &built.revision, changed) {
                let message = status::health_passed_message(elapsed);
                let notice = pass.info(reason::PROGRESSING, action::HEALTH_CHECK, message);
                pass.events.push(notice);
            }
            Some(elapsed)
        }
    };
    Ok(Applied {
        revision: built.revision,
        origin_revision: built.origin_revision,
        inventory,
        digest: built.digest,
        health,
        duration: pass.started.elapsed(),
        drift,
    })
}

/// Flux announces passed health checks when they were not passing before, or when a new
/// revision changed something.
fn announces_health(old: &KustomizationStatus, revision: &str, changed: bool) -> bool {
    let was_healthy = status::find(&old.conditions, HEALTHY).is_some_and(|c| c.status == "True");
    let new_revision = old.last_applied_revision.as_deref() != Some(revision);
    !was_healthy || (new_revision && changed)
}

/// The lines of the objects `changes` created, configured or deleted, counted in the metrics.
fn changed_lines(ctx: &Context, changes: &ChangeSet) -> Vec<String> {
    let changed = changes.entries.iter().filter(|entry| {
        matches!(
            entry.action,
            ChangeAction::Created | ChangeAction::Configured | ChangeAction::Deleted
        )
    });
    changed
        .map(|entry| {
            ctx.metrics.record_action(&entry.action.to_string(), 1);
            entry.to_string()
        })
        .collect()
}
