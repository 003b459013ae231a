//! What one pass carries from step to step, how a step's failure is classified, and the named
//! state of a pass parked for its health verdict.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::conditions::{READY, keys, reason};
use crate::api::kustomization::KustomizationStatus;
use crate::api::kustomization::given;
use crate::api::{Kustomization, ResourceInventory};
use crate::error::{Retry, StepError};

use super::ReconcileError;
use super::outcome::{Ending, PassOutcome, Progressed, progress_status};
use crate::controller::Context;
use crate::controller::events::{self, Notice};
use crate::controller::parked::{Started, Waited, Work};
use crate::controller::status::{self, BuiltRevision, Failed, Progress, Stamp};

/// One pass over a Kustomization, from the object the run read to its conclusion.
pub(crate) struct Pass {
    pub ks: Arc<Kustomization>,
    /// The status before the pass: what its status is computed from, and what transition
    /// times and events are measured against.
    pub old: KustomizationStatus,
    /// The status written during the pass (or, for a resumed pass, by it before it was
    /// parked): what the final write compares against instead of `old`.
    pub written: Option<KustomizationStatus>,
    /// When the pass is, for the status; moved on after the apply and at the verdict.
    pub stamp: Stamp,
    /// The `reconcile.fluxcd.io/requestedAt` the pass handles.
    pub requested_at: Option<String>,
    pub revision: Option<String>,
    pub origin_revision: Option<String>,
    pub started: Instant,
    /// `--requeue-dependency`.
    pub requeue_dependency: Duration,
    /// Its work on the revision, once begun.
    pub progress: Option<Progressed>,
    /// The source read, which its events relate to.
    pub source: Option<ObjectReference>,
    /// Events of the steps (apply, prune, health), in their order, sent when the pass ends
    /// or parks.
    pub events: Vec<Notice>,
}

/// A step that failed, with what the status and the requeue should say. The error side of
/// every step's result: its large parts are boxed.
pub(crate) struct StepFailure {
    pub failed: Box<Failed>,
    /// `Some(d)`: requeue after `d` (Flux's "nil error" requeues). `None`: return `error`.
    pub requeue: Option<Duration>,
    /// Announced with a Warning event.
    pub warns: bool,
    /// A Normal event instead of the Warning (dependencies not ready, health checks
    /// canceled), sent whether or not Ready changed, as Flux sends it.
    pub notice: Option<Box<Notice>>,
    pub error: Option<ReconcileError>,
}

/// A parked health wait canceled by new work (`CancelHealthCheckOnNewRevision`), as Flux
/// words it: the trigger is `Kind/namespace/name` of what brought the new work.
#[derive(Debug, thiserror::Error)]
#[error("New reconciliation triggered by {0}")]
pub(crate) struct HealthCheckCanceled(pub String);

impl StepError for HealthCheckCanceled {
    fn reason(&self) -> &'static str {
        reason::HEALTH_CHECK_CANCELED
    }

    /// Its own Normal event tells it.
    fn warns(&self) -> bool {
        false
    }
}

/// What brought `now` where a wait for `was` was parked: a new revision comes from the source,
/// anything else (generation, reconcile request) from the Kustomization itself.
pub(crate) fn trigger(ks: &Kustomization, was: &Work, now: &Work) -> String {
    let own = ks.namespace().unwrap_or_default();
    if was.revision != now.revision {
        let source = &ks.spec.source_ref;
        let namespace = given(source.namespace.as_deref()).unwrap_or(&own);
        return format!("{}/{namespace}/{}", source.kind.as_str(), source.name);
    }
    format!("Kustomization/{own}/{}", ks.name_any())
}

/// What the end of a pass needs from its apply: the build, for the history, and the new
/// inventory.
pub(crate) struct Rollout {
    pub built: BuiltRevision,
    pub inventory: ResourceInventory,
    /// The apply created or configured something (Flux's `drifted`).
    pub changed: bool,
    /// The Ready message's line naming drift left in place (`drift: warn`).
    pub drift: Option<String>,
}

/// Where the pipeline left a pass that did not fail.
pub(crate) enum Reached {
    /// The health verdict is in (`None`: nothing is checked): the pass concludes.
    Verdict(Rollout, Option<Waited>),
    /// Its objects are rolling out: the wait is to be parked.
    RollingOut(Rollout, Started),
    /// The wait parked for this very work goes on.
    StillWaiting,
}

/// A pass parked for its health verdict: what its conclusion needs.
pub(crate) struct ParkedPass {
    old: KustomizationStatus,
    /// Up to the health checks, with the inventory written for them.
    progress: Progressed,
    rollout: Rollout,
    started: Instant,
}

impl Pass {
    pub fn new(ks: Arc<Kustomization>, ctx: &Context) -> Self {
        let old = ctx
            .own_writes
            .ahead_of(&crate::controller::object_key(&ks), &ks)
            .or_else(|| ks.status.clone())
            .unwrap_or_default();
        Self {
            stamp: Stamp {
                generation: ks.metadata.generation.unwrap_or_default(),
                now: Timestamp::now(),
            },
            requested_at: ks.annotations().get(keys::REQUESTED_AT_ANNOTATION).cloned(),
            ks,
            old,
            written: None,
            revision: None,
            origin_revision: None,
            started: Instant::now(),
            requeue_dependency: ctx.options.requeue_dependency,
            progress: None,
            source: None,
            events: Vec::new(),
        }
    }

    /// What the status is computed from when the pass ends with `ending`.
    pub fn outcome<'a>(&'a self, ending: Ending<'a>) -> PassOutcome<'a> {
        PassOutcome {
            requested_at: self.requested_at.as_deref(),
            progress: self.progress.as_ref(),
            ending,
        }
    }

    /// The work a wait of this pass is for.
    pub fn work(&self) -> Work {
        Work {
            generation: self.stamp.generation,
            revision: self.revision.clone().unwrap_or_default(),
            requested_at: self.requested_at.clone(),
        }
    }

    pub fn metadata(&self) -> BTreeMap<String, String> {
        events::metadata(
            &self.ks,
            self.revision.as_deref(),
            self.origin_revision.as_deref(),
        )
    }

    /// A Normal event of step `action` with the pass's revisions, related to its source.
    pub fn info(&self, reason: &str, action: &'static str, message: impl Into<String>) -> Notice {
        Notice::info(reason, message, self.metadata())
            .acting(action)
            .related_to(self.source.as_ref())
    }

    /// Work on `revision` begins, fetching it. Returns the progress status to write when it
    /// is new work: a new revision or a new generation (a retry of the same ones is not:
    /// Ready already records the generation the last attempt saw).
    pub fn begin_work(&mut self, revision: &str) -> Option<KustomizationStatus> {
        let attempted_generation =
            status::find(&self.old.conditions, READY).and_then(|c| c.observed_generation);
        let new_work = self.old.last_attempted_revision.as_deref() != Some(revision)
            || attempted_generation != Some(self.stamp.generation);
        let progress = Progressed::begin(revision, self.ks.spec.timeout(), &self.stamp);
        let progress = self.progress.insert(progress);
        new_work.then(|| progress_status(&self.old, progress))
    }

    /// The pass enters `step` of its work.
    pub fn enter(&mut self, step: Progress) {
        if let Some(progress) = &mut self.progress {
            progress.enter(step, &self.stamp);
        }
    }

    /// A step failed: Ready=False (Stalled for a terminal error) from the error's own
    /// classification.
    pub fn fail<E: StepError>(&self, error: E) -> StepFailure {
        self.fail_with(error, |_| ())
    }

    /// [`Pass::fail`], where `amend` adds what the step knows beyond the error (history,
    /// inventory, health).
    pub fn fail_with<E: StepError>(&self, error: E, amend: impl FnOnce(&mut Failed)) -> StepFailure {
        let retry = error.retry();
        let mut failed = Box::new(Failed {
            reason: error.reason(),
            message: error.condition_message(self.requeue_dependency),
            terminal: retry == Retry::Terminal,
            ..Failed::default()
        });
        amend(&mut failed);
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
    pub fn built(&self, built: &BuiltRevision) -> BuiltRevision {
        BuiltRevision {
            duration: self.started.elapsed(),
            ..built.clone()
        }
    }

    /// The objects of `rollout` are rolling out: the health checks are what the pass shows
    /// until the verdict. Returns the status that says so, to write before parking.
    pub fn checking_health(&mut self, rollout: &Rollout) -> KustomizationStatus {
        let progress = self.progress.as_mut().expect("health checked after the apply");
        progress.parked = Some(rollout.inventory.clone());
        progress_status(&self.old, progress)
    }

    /// The pass, parked: what its conclusion needs, kept until the verdict.
    pub fn park(&mut self, rollout: Rollout) -> ParkedPass {
        ParkedPass {
            old: std::mem::take(&mut self.old),
            progress: self.progress.take().expect("parked after the apply"),
            rollout,
            started: self.started,
        }
    }

    /// New work canceled the wait of `parked`: it concludes with Ready=False
    /// HealthCheckCanceled (the history untouched, the inventory it applied kept), announced
    /// with a Normal event, and the new work runs at once, as Flux does.
    pub fn cancel(&mut self, parked: ParkedPass, trigger: String) -> StepFailure {
        let ParkedPass {
            old,
            progress,
            rollout,
            started,
        } = parked;
        self.written = Some(std::mem::replace(&mut self.old, old));
        self.revision = Some(progress.revision.clone());
        self.origin_revision = rollout.built.origin_revision.clone();
        self.progress = Some(progress);
        self.started = started;
        let message = format!("Health checks canceled due to new reconciliation triggered by {trigger}");
        let notice = self.info(
            reason::HEALTH_CHECK_CANCELED,
            events::action::HEALTH_CHECK,
            message,
        );
        let mut failure = self.fail_with(HealthCheckCanceled(trigger), |f| {
            f.inventory = Some(rollout.inventory);
        });
        failure.notice = Some(Box::new(notice));
        failure.requeue = Some(Duration::ZERO);
        failure.error = None;
        failure
    }

    /// The run after a parked wait's verdict takes the parked pass up where it was left: the
    /// verdict on its rollout is what remains.
    pub fn resume(&mut self, parked: ParkedPass, waited: Waited) -> Reached {
        let ParkedPass {
            old,
            progress,
            rollout,
            started,
        } = parked;
        // This run read the status the parked pass wrote.
        self.written = Some(std::mem::replace(&mut self.old, old));
        self.progress = Some(progress);
        self.started = started;
        self.origin_revision = rollout.built.origin_revision.clone();
        Reached::Verdict(rollout, Some(waited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(generation: i64, revision: &str) -> Work {
        Work {
            generation,
            revision: revision.into(),
            requested_at: None,
        }
    }

    #[test]
    fn the_trigger_of_a_cancellation_is_the_source_for_a_revision_else_the_kustomization() {
        let ks: Kustomization = serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"interval": "5m", "prune": true,
                "sourceRef": {"kind": "OCIRepository", "name": "bundle", "namespace": "flux-system"}}
        }))
        .unwrap();
        let cases = [
            (work(1, "r2"), "OCIRepository/flux-system/bundle"),
            (work(2, "r1"), "Kustomization/team-a/apps"),
        ];
        for (now, expected) in cases {
            assert_eq!(trigger(&ks, &work(1, "r1"), &now), expected);
        }
        let canceled = HealthCheckCanceled("GitRepository/a/b".into());
        assert_eq!(
            canceled.to_string(),
            "New reconciliation triggered by GitRepository/a/b"
        );
        assert_eq!(canceled.reason(), "HealthCheckCanceled");
        assert!(!canceled.warns(), "its own Normal event tells it");
    }
}
