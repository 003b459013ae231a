//! The reconcile driver. It reads as the pipeline:
//!
//! ```text
//! resolve source -> dependsOn -> [progress write] -> fetch -> build (blocking pool)
//!   -> apply -> inventory -> prune -> health [-> health progress write, parked until the verdict]
//!   -> status (computed once; one final write, only if it changed)
//! ```
//!
//! Each step is one function of `steps` with its own error, which becomes a `StepFailure` by
//! the error's own classification: the pipeline's one result shape is
//! `Result<Reached, StepFailure>`. The status is computed once, at the end, by the pure
//! `outcome::status_after` from how far the pass got and how it ended; before that, only
//! Flux's progress writes (new work, and health checks about to be parked).
//!
//! A health wait that the first look at the objects does not decide is parked (see
//! `parked`): the health progress is written, the worker is released, and the run that
//! follows the verdict resumes the parked pass right after the source is resolved. Every pass
//! that does not park concludes in `conclude`.
//!
//! Steps that touch the API: resolve, dependsOn, vars, apply, prune, health, status writes and
//! events. Events are collected during the pass and emitted at the end, only for real changes.

mod outcome;
mod pass;
mod steps;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use flux_runtime::requeue::jittered;
use flux_runtime::telemetry::{ObjectLabels, Outcome, ReconcileResult};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::Instrument;

use crate::api::conditions::{READY, reason};
use crate::api::kustomization::KustomizationStatus;
use crate::api::source::Artifact;
use crate::api::{Kustomization, duration};
use crate::error::StepError;
use crate::health::cel::HealthExprs;

use super::events::{self, Notice};
use super::finalizer::{self, FinalizerError, Stage};
use super::pacing::{PROGRESS_DELAY, progress_after};
use super::parked::{Resume, Started};
use super::status::{self, Applied, Failed, Progress};
use super::{Context, IDENTITY, finalize};
use outcome::Ending;
use pass::{Pass, Reached, Rollout, StepFailure};

pub(crate) use pass::ParkedPass;

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
    Finalizer(#[from] FinalizerError),
}

impl ReconcileError {
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Step(error) => error.is_terminal(),
            Self::Finalize(_) | Self::Finalizer(_) => false,
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
    let result = async {
        match finalizer::stage(&ks) {
            Stage::Held => reconcile_apply(ks, &ctx, &began).await,
            Stage::Deleting => {
                ctx.waits.cancel(&key);
                ctx.own_writes.forget(&key);
                finalize::cleanup(&ks, &ctx).await?;
                finalizer::remove(&api, &ks, IDENTITY.field_manager).await?;
                let elapsed = began.lock().expect("pass start lock").map(|b| b.elapsed());
                if !ctx.options.feature_gates.disable_commit_status_event
                    && let Some(notice) = finalize::finished_notice(&ks, elapsed.unwrap_or_default())
                {
                    ctx.notifier.emit(&ks, &notice);
                }
                Ok(Action::await_change())
            }
            // The patch's watch event runs the first pass.
            Stage::Missing => {
                finalizer::add(&api, &ks, IDENTITY.field_manager).await?;
                Ok(Action::await_change())
            }
            Stage::Released => Ok(Action::await_change()),
        }
    }
    .instrument(span)
    .await;
    let result_label = match &result {
        // A pass that returns no error ends the backoff; `error_policy` counts the failures.
        Ok(_) => {
            ctx.failures.reset(&key);
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

/// One pass: suspended, or the pipeline, then either parked off the worker or concluded.
async fn reconcile_apply(
    ks: Arc<Kustomization>,
    ctx: &Context,
    began: &Mutex<Option<Instant>>,
) -> Result<Action, ReconcileError> {
    let mut pass = Pass::new(ks, ctx);
    if pass.ks.spec.suspend {
        ctx.waits.cancel(&super::object_key(&pass.ks));
        tracing::info!("reconciliation is suspended for this object");
        let status = outcome::status_after(&pass.old, &pass.outcome(Ending::Suspended), &pass.stamp);
        write_if_changed(ctx, &pass, &status).await?;
        return Ok(Action::await_change());
    }

    let ended = match run_pipeline(&mut pass, ctx).await {
        Ok(Reached::Verdict(rollout, waited)) => steps::verdict(&mut pass, rollout, waited),
        Ok(Reached::RollingOut(rollout, wait)) => match park(&mut pass, ctx, rollout, wait).await {
            Ok(()) => return Ok(released(ctx, &pass, began)),
            Err(failure) => Err(failure),
        },
        Ok(Reached::StillWaiting) => return Ok(released(ctx, &pass, began)),
        Err(failure) => Err(failure),
    };
    conclude(pass, ctx, ended, began).await
}

/// The pipeline up to the health verdict, or a wait to park.
async fn run_pipeline(pass: &mut Pass, ctx: &Context) -> Result<Reached, StepFailure> {
    let exprs = steps::health_exprs(pass).await?;
    let artifact = steps::resolve(pass, ctx).await?;

    // A parked health wait for this very work: the pass it parked concludes once the wait has
    // a verdict. For other work (a new revision, generation or reconcile request) the wait is
    // dropped and this pass runs; with CancelHealthCheckOnNewRevision the parked pass first
    // concludes as canceled.
    let cancel = ctx.options.feature_gates.cancel_health_check_on_new_revision;
    match ctx
        .waits
        .resume(&super::object_key(&pass.ks), &pass.work(), cancel)
    {
        Resume::Idle => {}
        Resume::Waiting => return Ok(Reached::StillWaiting),
        Resume::Finished(parked, waited) => return Ok(pass.resume(parked, waited)),
        Resume::Superseded(parked, was) => {
            let trigger = pass::trigger(&pass.ks, &was, &pass.work());
            return Err(pass.cancel(parked, trigger));
        }
    }

    steps::depends_on(pass, ctx, &artifact).await?;

    // New work: say so before the (possibly long) rest of the pass.
    let progress = pass.begin_work(&artifact.revision).map(|status| {
        let ks = pass.ks.clone();
        async move {
            ctx.own_writes
                .write_status(&ctx.client, &ks, &status)
                .await
                .map(|()| status)
        }
    });
    let (reached, progress) =
        progress_after(PROGRESS_DELAY, progress, roll_out(pass, ctx, &artifact, exprs)).await;
    match progress {
        Some(Ok(status)) => pass.written = Some(status),
        // The pass's next write tells the outcome.
        Some(Err(error)) => tracing::info!(%error, "progress status not written"),
        None => {}
    }
    reached
}

/// The revision from its artifact to the health verdict.
async fn roll_out(
    pass: &mut Pass,
    ctx: &Context,
    artifact: &Artifact,
    exprs: Arc<HealthExprs>,
) -> Result<Reached, StepFailure> {
    let (tree, dir) = steps::fetch(pass, ctx, artifact).await?;
    pass.enter(Progress::Building);
    // Who applies: the controller, an impersonated ServiceAccount or a remote cluster.
    let tools = ctx
        .identities
        .for_kustomization(&pass.ks)
        .await
        .map_err(|e| pass.fail(e))?;
    let (built, revision) = steps::build(pass, ctx, tree, dir, artifact).await?;
    pass.enter(Progress::DetectingDrift);
    let applied = steps::apply(pass, ctx, &tools, &built, &revision).await?;
    let inventory = steps::prune(pass, ctx, &tools, &applied, &revision).await?;
    let rollout = Rollout {
        built: revision,
        inventory,
        changed: applied.changed,
        drift: super::drift_mode::ready_line(&applied.drifted),
    };
    Ok(steps::check_health(pass, ctx, &tools, applied, rollout, exprs).await)
}

/// A rollout to wait for: say so as Flux does, with the new inventory (a deletion meanwhile
/// prunes what this pass applied), and give the worker back.
async fn park(pass: &mut Pass, ctx: &Context, rollout: Rollout, wait: Started) -> Result<(), StepFailure> {
    let status = pass.checking_health(&rollout);
    ctx.own_writes
        .write_status(&ctx.client, &pass.ks, &status)
        .await
        .map_err(|e| pass.fail(e))?;
    let (key, work) = (super::object_key(&pass.ks), pass.work());
    ctx.waits.park(&key, work, pass.park(rollout), wait);
    Ok(())
}

/// The pass goes on off the worker; the run after its verdict concludes it, and records the
/// reconcile duration from this pass's start.
fn released(ctx: &Context, pass: &Pass, began: &Mutex<Option<Instant>>) -> Action {
    *began.lock().expect("pass start lock") = None;
    emit_changes(ctx, pass);
    Action::await_change()
}

/// The end of every pass that does not park: its status computed from what it did and
/// written if it changed, then the Ready metric, the events and the requeue.
async fn conclude(
    pass: Pass,
    ctx: &Context,
    ended: Result<Applied, StepFailure>,
    began: &Mutex<Option<Instant>>,
) -> Result<Action, ReconcileError> {
    *began.lock().expect("pass start lock") = Some(pass.started);
    let ending = match &ended {
        Ok(applied) => Ending::Applied(applied),
        Err(failure) => Ending::Failed(&failure.failed),
    };
    let status = outcome::status_after(&pass.old, &pass.outcome(ending), &pass.stamp);
    let written = write_if_changed(ctx, &pass, &status).await?;
    let ks = &pass.ks;
    let ready = status::find(&status.conditions, READY).map(|c| c.status.clone());
    let labels = ObjectLabels {
        kind: "Kustomization".into(),
        name: ks.name_any(),
        namespace: ks.namespace().unwrap_or_default(),
    };
    ctx.metrics.record_ready(&labels, ready.as_deref());

    // Events as Flux sends them: the steps' (changes, passed health checks), then the
    // outcome: success on every successful run, failures when Ready changed.
    emit_changes(ctx, &pass);
    // drift: warn: a new set of drifted objects left in place
    if written && let Some(notice) = super::drift_mode::notice(&pass.old, &status, pass.metadata()) {
        ctx.notifier.emit(ks, &notice.related_to(pass.source.as_ref()));
    }
    match ended {
        Ok(_) => Ok(succeeded(ctx, &pass)),
        Err(failure) => failed(ctx, &pass, failure),
    }
}

/// A pass that applied its revision: announced on every run, as Flux does (notification
/// providers set commit statuses from it) unless the DisableCommitStatusEvent gate turns that
/// event off, then the next run at the interval.
fn succeeded(ctx: &Context, pass: &Pass) -> Action {
    let ks = &pass.ks;
    let message = format!(
        "Reconciliation finished in {}, next run in {}",
        duration::format(pass.started.elapsed()),
        duration::format(ks.spec.interval())
    );
    tracing::info!("{message}");
    if !ctx.options.feature_gates.disable_commit_status_event {
        let mut notice = pass.info(
            reason::RECONCILIATION_SUCCEEDED,
            events::action::RECONCILE,
            message,
        );
        (notice.metadata).insert(events::COMMIT_STATUS_KEY.into(), "update".into());
        ctx.notifier.emit(ks, &notice);
    }
    let random: f64 = rand::random();
    Action::requeue(jittered(
        ks.spec.interval(),
        ctx.options.runtime.interval_jitter_percentage,
        random,
    ))
}

/// A pass a step failed: its own notice, or a Warning, on every failed run as Flux sends
/// them; then requeued as the error's classification says, or returned to `error_policy`.
fn failed(ctx: &Context, pass: &Pass, failure: StepFailure) -> Result<Action, ReconcileError> {
    let elapsed = duration::format(pass.started.elapsed());
    let failed = match failure.requeue {
        Some(after) => format!(
            "Reconciliation failed after {elapsed}, next try in {}",
            duration::format(after)
        ),
        None => format!("Reconciliation failed after {elapsed}"),
    };
    tracing::error!(error = %failure.failed.message, reason = failure.failed.reason, "{failed}");
    if let Some(notice) = failure.notice {
        ctx.notifier.emit(&pass.ks, &notice);
    } else if failure.warns {
        let Failed { reason, message, .. } = *failure.failed;
        let notice = Notice::error(reason, message, pass.metadata()).related_to(pass.source.as_ref());
        ctx.notifier.emit(&pass.ks, &notice);
    }
    match (failure.error, failure.requeue) {
        (Some(error), _) => Err(error),
        (None, Some(after)) => Ok(Action::requeue(after)),
        (None, None) => Ok(Action::await_change()),
    }
}

/// The events of the pass's steps, in their order.
fn emit_changes(ctx: &Context, pass: &Pass) {
    for notice in &pass.events {
        ctx.notifier.emit(&pass.ks, notice);
    }
}

/// Writes `status` when it differs from the stored one in more than times and counters.
/// Returns whether it wrote.
async fn write_if_changed(
    ctx: &Context,
    pass: &Pass,
    status: &KustomizationStatus,
) -> Result<bool, ReconcileError> {
    let stored = pass.written.as_ref().unwrap_or(&pass.old);
    if status::same_ignoring_time(stored, status) {
        return Ok(false);
    }
    ctx.own_writes
        .write_status(&ctx.client, &pass.ks, status)
        .await
        .map_err(|e| ReconcileError::Step(Box::new(e)))?;
    Ok(true)
}
