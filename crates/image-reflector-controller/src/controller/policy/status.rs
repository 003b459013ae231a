//! The status an evaluation leaves, computed once from its outcome: the conditions as Flux's
//! `ProgressiveStatus` and result finalizer (fluxcd/pkg `runtime/reconcile`) leave them,
//! `latestRef` and `observedPreviousRef`, `observedGeneration`, `lastHandledReconcileAt`, the
//! event Flux's `notify` emits and the requeue.

use std::time::Duration;

use flux_runtime::conditions::{
    FALSE, READY, RECONCILING, STALLED, Stamp, TRUE, UNKNOWN, delete_condition, find, is_true,
    mark_reconciling, mark_stalled, set_condition,
};
use flux_runtime::error::StepError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::PolicyFailure;
use crate::api::ImagePolicyStatus;
use crate::api::conditions::reason;
use crate::api::image_policy::ImageRef;

const IN_PROGRESS: &str = "reconciliation in progress";

/// What an evaluation of the policy at `stamp.generation` came to.
#[derive(Debug, Clone)]
pub(crate) struct Evaluation<'a> {
    /// `reconcile.fluxcd.io/requestedAt` of the policy.
    pub requested_at: Option<&'a str>,
    /// `spec.requeue_interval()`: only `Always` has one.
    pub interval: Option<Duration>,
    /// `--requeue-dependency`.
    pub requeue_dependency: Duration,
    /// The latest image with its digest decided, or why there is none.
    pub outcome: Result<ImageRef, PolicyFailure>,
}

/// When to evaluate again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeue {
    After(Duration),
    /// The workqueue's exponential backoff (`--min-retry-delay` .. `--max-retry-delay`).
    Backoff,
    /// Only a change of the policy or a new scan revision.
    AwaitChange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Normal,
    Warning,
    /// A Normal Kubernetes event that is not forwarded to notification-controller.
    Trace,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    pub status: ImagePolicyStatus,
    pub event: Option<PolicyEvent>,
    pub requeue: Requeue,
}

/// `Latest image tag for <name> resolved to <tag>[ with digest <d>][ (previously <ref>)]`.
pub(crate) fn ready_message(latest: &ImageRef, previous: Option<&ImageRef>) -> String {
    let mut message = format!("Latest image tag for {} resolved to {}", latest.name, latest.tag);
    if !latest.digest.is_empty() {
        message.push_str(&format!(" with digest {}", latest.digest));
    }
    if let Some(previous) = previous.filter(|p| *p != latest) {
        message.push_str(&format!(" (previously {previous})"));
    }
    message
}

/// The status Flux writes before the work when the generation changed; `None` otherwise.
pub(crate) fn progress(old: &ImagePolicyStatus, stamp: &Stamp) -> Option<ImagePolicyStatus> {
    (stamp.generation != old.observed_generation).then(|| {
        let mut status = old.clone();
        mark_progress(&mut status, stamp);
        status
    })
}

fn mark_progress(status: &mut ImagePolicyStatus, stamp: &Stamp) {
    progressive(&mut status.conditions, stamp, IN_PROGRESS);
    if stamp.generation != status.observed_generation {
        let message = format!(
            "processing object: new generation {} -> {}",
            status.observed_generation, stamp.generation
        );
        progressive(&mut status.conditions, stamp, &message);
    }
}

/// The status, event and requeue after an evaluation, from the status before it.
pub(crate) fn compute(old: &ImagePolicyStatus, evaluation: &Evaluation<'_>, stamp: &Stamp) -> Verdict {
    let mut status = old.clone();
    let interval = evaluation.interval.unwrap_or_default();
    let mut ready_msg = String::new();
    let step = match &evaluation.outcome {
        Err(failure) if failure.precedes_progress() => stall(&mut status, stamp, failure),
        Err(failure) => {
            mark_progress(&mut status, stamp);
            fail(&mut status, stamp, failure, evaluation.requeue_dependency)
        }
        Ok(latest) => {
            mark_progress(&mut status, stamp);
            if status.latest_ref.as_ref() != Some(latest) {
                status.observed_previous_ref = status.latest_ref.replace(latest.clone());
            }
            ready_msg = ready_message(latest, status.observed_previous_ref.as_ref());
            // The finalizer sets Ready from the success message.
            delete_condition(&mut status.conditions, READY);
            Step {
                requeue_after: interval,
                error: None,
            }
        }
    };
    let error = finalize(&mut status.conditions, stamp, interval, &step, &ready_msg);
    if let Some(reconciling) =
        find(&status.conditions, RECONCILING).filter(|_| is_reconciling(&status.conditions))
    {
        let message = reconciling.message.clone();
        set_condition(
            &mut status.conditions,
            stamp,
            RECONCILING,
            TRUE,
            reason::PROGRESSING_WITH_RETRY,
            &message,
        );
    }
    if is_stalled(&status.conditions) || is_ready(&status.conditions) {
        status.observed_generation = stamp.generation;
    }
    if let Some(requested_at) = evaluation.requested_at {
        status.last_handled_reconcile_at = Some(requested_at.to_string());
    }
    let requeue = match (error, step.requeue_after) {
        (Some(_), _) => Requeue::Backoff,
        (None, after) if after.is_zero() => Requeue::AwaitChange,
        (None, after) => Requeue::After(after),
    };
    let event = notify(&old.conditions, &status.conditions, &ready_msg);
    Verdict {
        status,
        event,
        requeue,
    }
}

/// What the failed step hands to the finalizer: a requeue and an error.
struct Step {
    requeue_after: Duration,
    error: Option<String>,
}

fn stall(status: &mut ImagePolicyStatus, stamp: &Stamp, failure: &PolicyFailure) -> Step {
    mark_stalled(
        &mut status.conditions,
        stamp,
        failure.reason(),
        &failure.to_string(),
    );
    Step {
        requeue_after: Duration::ZERO,
        error: None,
    }
}

fn fail(
    status: &mut ImagePolicyStatus,
    stamp: &Stamp,
    failure: &PolicyFailure,
    dependency: Duration,
) -> Step {
    if failure.is_terminal() {
        return stall(status, stamp, failure);
    }
    let message = failure.condition_message(dependency);
    if failure.marks_ready() {
        set_condition(
            &mut status.conditions,
            stamp,
            READY,
            FALSE,
            failure.reason(),
            &message,
        );
    }
    match failure {
        PolicyFailure::NoTags => Step {
            requeue_after: dependency,
            error: None,
        },
        _ => Step {
            requeue_after: Duration::ZERO,
            error: Some(message),
        },
    }
}

/// `ProgressiveStatus(false, …)`: Reconciling=True, and Ready=Unknown unless Ready is known.
fn progressive(conditions: &mut Vec<Condition>, stamp: &Stamp, message: &str) {
    mark_reconciling(conditions, stamp, reason::PROGRESSING, message);
    if is_unknown(conditions, READY) {
        set_condition(conditions, stamp, READY, UNKNOWN, reason::PROGRESSING, message);
    }
}

/// Flux's `ResultFinalizer.Finalize` where success is "no error and the requeue is the
/// interval"; returns the error handed back to the workqueue.
fn finalize(
    conditions: &mut Vec<Condition>,
    stamp: &Stamp,
    interval: Duration,
    step: &Step,
    ready_msg: &str,
) -> Option<String> {
    let is_success = |requeue_after: Duration, failed: bool| !failed && requeue_after == interval;
    // Without an interval a clean result cannot tell success from a stall.
    let success_without_requeue = interval.is_zero();
    let success = is_success(step.requeue_after, step.error.is_some());
    if step.error.is_some() {
        delete_condition(conditions, STALLED);
    }
    if !success || success_without_requeue {
        if !step.requeue_after.is_zero() && !is_success(step.requeue_after, false) {
            delete_condition(conditions, STALLED);
        }
        let overwrite = is_unknown(conditions, READY) || is_true(conditions, READY);
        if let Some(stalled) = find(conditions, STALLED).filter(|c| c.status == TRUE && overwrite) {
            let (reason, message) = (stalled.reason.clone(), stalled.message.clone());
            set_condition(conditions, stamp, READY, FALSE, &reason, &message);
        }
    }
    if success || is_true(conditions, STALLED) {
        delete_condition(conditions, RECONCILING);
    }
    let mut error = step.error.clone();
    if let Some(message) = &error
        && (is_unknown(conditions, READY) || is_true(conditions, READY))
    {
        set_condition(conditions, stamp, READY, FALSE, reason::FAILED, message);
    }
    // A success that still says Ready=False is handed back as an error.
    if success
        && !success_without_requeue
        && !is_stalled(conditions)
        && let Some(ready) = find(conditions, READY).filter(|c| c.status == FALSE)
    {
        error = Some(ready.message.clone());
    }
    if is_unknown(conditions, READY)
        && is_success(step.requeue_after, error.is_some())
        && !is_reconciling(conditions)
        && !is_stalled(conditions)
    {
        set_condition(conditions, stamp, READY, TRUE, reason::SUCCEEDED, ready_msg);
    }
    error
}

/// Flux's `notify`: Normal when Ready's message changed or Ready came back, Warning on every
/// failed evaluation, a trace of the unchanged message otherwise.
fn notify(old: &[Condition], new: &[Condition], ready_msg: &str) -> Option<PolicyEvent> {
    let ready = find(new, READY)?;
    let event = |type_, reason: &str, message: &str| PolicyEvent {
        type_,
        reason: reason.to_string(),
        message: message.to_string(),
    };
    let (was, is) = (is_ready(old), is_ready(new));
    let old_message = find(old, READY).map(|c| c.message.as_str()).unwrap_or_default();
    Some(if is && (!was || old_message != ready.message) {
        event(EventType::Normal, &ready.reason, &ready.message)
    } else if !is {
        event(EventType::Warning, &ready.reason, &ready.message)
    } else {
        event(EventType::Trace, reason::SUCCEEDED, ready_msg)
    })
}

/// A missing condition counts as Unknown.
fn is_unknown(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_none_or(|c| c.status == UNKNOWN)
}

fn is_stalled(conditions: &[Condition]) -> bool {
    !is_true(conditions, RECONCILING) && is_true(conditions, STALLED)
}

fn is_reconciling(conditions: &[Condition]) -> bool {
    !is_true(conditions, STALLED) && is_true(conditions, RECONCILING)
}

fn is_ready(conditions: &[Condition]) -> bool {
    !is_stalled(conditions) && !is_reconciling(conditions) && is_true(conditions, READY)
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
