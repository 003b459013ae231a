//! A pass's status, computed from what the pass did. Pure, like `status`: the driver records
//! how far a pass got and how it ended, and these functions say what the status shows for
//! that, once, at the end of the pass.
//!
//! Two statuses are written before the end, as Flux writes them: the progress of new work and
//! the health checks of a wait about to be parked. Both are [`progress_status`]; the final
//! status starts from it, so a pass shows at its end what it showed on its way.

use std::time::Duration;

use crate::api::ResourceInventory;
use crate::api::conditions::reason;
use crate::api::kustomization::KustomizationStatus;

use crate::controller::status::{self, Applied, Failed, Progress, Stamp};

/// How far a pass got in its work on a revision: the step its Reconciling condition names.
#[derive(Clone, Debug)]
pub(crate) struct Progressed {
    pub revision: String,
    /// `spec.timeout`, named in the Reconciling message.
    pub timeout: Duration,
    /// When the work began, fetching the artifact.
    pub began: Stamp,
    /// The last step entered, and when.
    pub step: Progress,
    pub at: Stamp,
    /// The inventory written with the health checks when the wait was parked.
    pub parked: Option<ResourceInventory>,
}

impl Progressed {
    /// Work on `revision` begins at `stamp`, fetching it.
    pub fn begin(revision: &str, timeout: Duration, stamp: &Stamp) -> Self {
        Self {
            revision: revision.to_string(),
            timeout,
            began: stamp.clone(),
            step: Progress::Fetching,
            at: stamp.clone(),
            parked: None,
        }
    }

    pub fn enter(&mut self, step: Progress, stamp: &Stamp) {
        self.step = step;
        self.at = stamp.clone();
    }
}

/// How a pass ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ending<'a> {
    /// Suspended: no step ran.
    Suspended,
    /// The revision is applied, and healthy when checked.
    Applied(&'a Applied),
    /// A step failed.
    Failed(&'a Failed),
}

/// What a pass did: all its final status is computed from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PassOutcome<'a> {
    /// The `reconcile.fluxcd.io/requestedAt` the pass handled.
    pub requested_at: Option<&'a str>,
    /// Its work on a revision, once begun (the source resolved, the dependencies ready).
    pub progress: Option<&'a Progressed>,
    pub ending: Ending<'a>,
}

/// The status of a pass at its last step: Ready=Unknown and Reconciling naming the step
/// (Flux's progress writes), the revision attempted once its artifact is fetched, and, for a
/// wait parked, the health checks with the inventory of what they wait for.
pub(crate) fn progress_status(old: &KustomizationStatus, progress: &Progressed) -> KustomizationStatus {
    let Progressed {
        revision,
        timeout,
        began,
        step,
        at,
        parked,
    } = progress;
    let mut status = old.clone();
    status::mark_progress(&mut status, began, Progress::Fetching, revision, *timeout);
    if *step != Progress::Fetching {
        // Every later step begins once the artifact is fetched and its path found.
        status.last_attempted_revision = Some(revision.clone());
        let message = step.message(revision, *timeout);
        status::mark_reconciling(&mut status.conditions, at, reason::PROGRESSING, &message);
    }
    if let Some(inventory) = parked {
        status::mark_health_checks(&mut status, at, revision, *timeout, Some(inventory.clone()));
        // As written then: measured against the status before the pass.
        status::keep_transition_times(old, &mut status);
    }
    status
}

/// The status at the end of a pass, from the status before it (`old`) and what it did;
/// `stamp` is when it ended. Computed once per pass.
pub(crate) fn status_after(
    old: &KustomizationStatus,
    outcome: &PassOutcome,
    stamp: &Stamp,
) -> KustomizationStatus {
    let mut status = match outcome.progress {
        Some(progress) => progress_status(old, progress),
        None => old.clone(),
    };
    match outcome.ending {
        Ending::Suspended => {}
        Ending::Applied(applied) => status::mark_applied(&mut status, stamp, applied),
        Ending::Failed(failed) => status::mark_failed(&mut status, stamp, failed),
    }
    status::finalize_status(&mut status, stamp, outcome.requested_at);
    status::keep_transition_times(old, &mut status);
    status
}

#[cfg(test)]
mod tests {
    //! The expected conditions are what the integration tests assert on a real API server
    //! (tests/integration/controller.rs, health_parking.rs) and what Flux's kustomize-controller
    //! writes for the same steps, not values read back from these functions.

    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::ResourceRef;
    use crate::controller::status::BuiltRevision;

    const R1: &str = "main@sha1:1111111111111111111111111111111111111111";
    const R2: &str = "main@sha1:2222222222222222222222222222222222222222";
    const TIMEOUT: Duration = Duration::from_secs(300);

    fn at(second: i64) -> Stamp {
        Stamp {
            generation: 1,
            now: Timestamp::from_second(1_767_225_600 + second).unwrap(),
        }
    }

    fn time(second: i64) -> String {
        Timestamp::from_second(1_767_225_600 + second)
            .unwrap()
            .to_string()
    }

    fn inventory(names: &[&str]) -> ResourceInventory {
        let entries = names.iter().map(|name| ResourceRef {
            id: format!("apps_{name}__ConfigMap"),
            v: "v1".into(),
        });
        ResourceInventory {
            entries: entries.collect(),
        }
    }

    /// The conditions as `(type, status, reason, message)`, in their order.
    fn shown(status: &KustomizationStatus) -> Vec<(&str, &str, &str, &str)> {
        let conditions = status.conditions.iter();
        conditions
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.as_str(),
                    c.message.as_str(),
                )
            })
            .collect()
    }

    fn transition(status: &KustomizationStatus, type_: &str) -> String {
        let condition = status::find(&status.conditions, type_).expect("the condition is set");
        condition.last_transition_time.0.to_string()
    }

    /// The history as `(revision, status)`, newest first.
    fn history(status: &KustomizationStatus) -> Vec<(&str, &str)> {
        let entries = status.history.iter();
        entries
            .map(|s| {
                let revision = s.metadata.get("revision").map_or("", String::as_str);
                (revision, s.last_reconciled_status.as_str())
            })
            .collect()
    }

    fn built(revision: &str, digest: &str) -> BuiltRevision {
        BuiltRevision {
            digest: digest.into(),
            revision: revision.into(),
            origin_revision: None,
            duration: Duration::from_secs(2),
        }
    }

    fn applied(revision: &str, digest: &str, names: &[&str], health: Option<Duration>) -> Applied {
        Applied {
            revision: revision.into(),
            origin_revision: None,
            inventory: inventory(names),
            digest: digest.into(),
            health,
            duration: Duration::from_secs(4),
            drift: None,
        }
    }

    fn failed(reason: &'static str, message: &str) -> Failed {
        let message = message.into();
        Failed {
            reason,
            message,
            ..Failed::default()
        }
    }

    /// Work on `revision` begun at second 0 and in `step` since second `second`.
    fn progressed(revision: &str, step: Progress, second: i64) -> Progressed {
        let mut progress = Progressed::begin(revision, TIMEOUT, &at(0));
        progress.enter(step, &at(second));
        progress
    }

    /// Parked at second `second` for the health checks of `revision`, which applied `names`.
    fn parked(revision: &str, names: &[&str], second: i64) -> Progressed {
        Progressed {
            parked: Some(inventory(names)),
            ..progressed(revision, Progress::HealthChecks, second)
        }
    }

    fn outcome<'a>(progress: Option<&'a Progressed>, ending: Ending<'a>) -> PassOutcome<'a> {
        PassOutcome {
            requested_at: None,
            progress,
            ending,
        }
    }

    /// R1 applied and ready, with the ConfigMap `a`.
    fn ready_at_r1() -> KustomizationStatus {
        let done = applied(R1, "sha256:1", &["a"], None);
        let first = outcome(None, Ending::Applied(&done));
        status_after(&KustomizationStatus::default(), &first, &at(-600))
    }

    #[test]
    fn a_failed_fetch_is_retried_and_keeps_what_was_applied() {
        let old = ready_at_r1();
        let progress = progressed(R2, Progress::Fetching, 0);
        let message =
            "failed to download archive from http://source/apps/repo.tar.gz: 503 Service Unavailable";
        let failure = failed("ArtifactFailed", message);
        let status = status_after(&old, &outcome(Some(&progress), Ending::Failed(&failure)), &at(1));

        let fetching = format!("Fetching manifests for revision {R2} with a timeout of 5m0s");
        assert_eq!(
            shown(&status),
            [
                ("Reconciling", "True", "ProgressingWithRetry", fetching.as_str()),
                ("Ready", "False", "ArtifactFailed", message),
            ]
        );
        assert_eq!(status.last_applied_revision.as_deref(), Some(R1));
        assert_eq!(
            status.last_attempted_revision.as_deref(),
            Some(R1),
            "attempted once its artifact is fetched"
        );
        assert_eq!(status.inventory, Some(inventory(&["a"])));
        assert_eq!(
            history(&status),
            [(R1, "ReconciliationSucceeded")],
            "nothing built"
        );
    }

    #[test]
    fn a_build_that_failed_to_apply_is_recorded_and_the_old_inventory_kept() {
        let old = ready_at_r1();
        let progress = progressed(R2, Progress::DetectingDrift, 0);
        let message =
            "Deployment/apps/web dry-run failed (Invalid): spec.template.spec.containers: Required value";
        let failure = Failed {
            build: Some(built(R2, "sha256:2")),
            ..failed("ReconciliationFailed", message)
        };
        let status = status_after(&old, &outcome(Some(&progress), Ending::Failed(&failure)), &at(30));

        let detecting = format!("Detecting drift for revision {R2} with a timeout of 5m0s");
        assert_eq!(
            shown(&status),
            [
                ("Reconciling", "True", "ProgressingWithRetry", detecting.as_str()),
                ("Ready", "False", "ReconciliationFailed", message),
            ]
        );
        assert_eq!(
            transition(&status, "Reconciling"),
            time(0),
            "since the step began"
        );
        assert_eq!(transition(&status, "Ready"), time(30), "since it failed");
        assert_eq!(status.last_applied_revision.as_deref(), Some(R1));
        assert_eq!(status.last_attempted_revision.as_deref(), Some(R2));
        assert_eq!(status.inventory, Some(inventory(&["a"])), "nothing applied");
        assert_eq!(status.observed_generation, old.observed_generation);
        assert_eq!(
            history(&status),
            [(R2, "ReconciliationFailed"), (R1, "ReconciliationSucceeded")]
        );
    }

    #[test]
    fn applied_and_waiting_for_health_shows_the_checks_and_the_new_inventory() {
        let old = ready_at_r1();
        let status = progress_status(&old, &parked(R2, &["a", "b"], 20));

        let checking = format!("Running health checks for revision {R2} with a timeout of 5m0s");
        assert_eq!(
            shown(&status),
            [
                ("Reconciling", "True", "Progressing", checking.as_str()),
                ("Ready", "Unknown", "Progressing", "Reconciliation in progress"),
                ("Healthy", "Unknown", "Progressing", checking.as_str()),
            ]
        );
        assert_eq!(
            status.inventory,
            Some(inventory(&["a", "b"])),
            "what is awaited is in the inventory already"
        );
        assert_eq!(status.last_attempted_revision.as_deref(), Some(R2));
        assert_eq!(
            status.last_applied_revision.as_deref(),
            Some(R1),
            "applied once healthy"
        );
        assert_eq!(history(&status), [(R1, "ReconciliationSucceeded")]);
    }

    #[test]
    fn a_parked_pass_concludes_applied_and_healthy() {
        let old = ready_at_r1();
        let progress = parked(R2, &["a", "b"], 20);
        let done = applied(R2, "sha256:2", &["a", "b"], Some(Duration::from_secs(95)));
        let status = status_after(&old, &outcome(Some(&progress), Ending::Applied(&done)), &at(120));

        let message = format!("Applied revision: {R2}");
        assert_eq!(
            shown(&status),
            [
                ("Ready", "True", "ReconciliationSucceeded", message.as_str()),
                ("Healthy", "True", "Succeeded", "Health check passed in 1m35s"),
            ],
            "done reconciling"
        );
        assert_eq!(status.last_applied_revision.as_deref(), Some(R2));
        assert_eq!(status.last_attempted_revision.as_deref(), Some(R2));
        assert_eq!(status.observed_generation, 1);
        assert_eq!(status.inventory, Some(inventory(&["a", "b"])));
        assert_eq!(
            history(&status),
            [(R2, "ReconciliationSucceeded"), (R1, "ReconciliationSucceeded")]
        );
    }

    #[test]
    fn a_parked_pass_past_its_timeout_fails_its_health_check() {
        let old = ready_at_r1();
        let progress = parked(R2, &["a", "b"], 20);
        let unhealthy = "timeout waiting for: [Widget/apps/w-slow: InProgress]";
        let failure = Failed {
            build: Some(built(R2, "sha256:2")),
            inventory: Some(inventory(&["a", "b"])),
            unhealthy: Some(unhealthy.into()),
            ..failed(
                "HealthCheckFailed",
                &format!("health check failed after 5m0s: {unhealthy}"),
            )
        };
        let status = status_after(
            &old,
            &outcome(Some(&progress), Ending::Failed(&failure)),
            &at(320),
        );

        let checking = format!("Running health checks for revision {R2} with a timeout of 5m0s");
        let ready = format!("health check failed after 5m0s: {unhealthy}");
        assert_eq!(
            shown(&status),
            [
                ("Reconciling", "True", "ProgressingWithRetry", checking.as_str()),
                ("Ready", "False", "HealthCheckFailed", ready.as_str()),
                ("Healthy", "False", "HealthCheckFailed", unhealthy),
            ]
        );
        assert_eq!(
            status.last_applied_revision.as_deref(),
            Some(R1),
            "not applied until healthy"
        );
        assert_eq!(status.last_attempted_revision.as_deref(), Some(R2));
        assert_eq!(
            status.inventory,
            Some(inventory(&["a", "b"])),
            "the applied objects are tracked"
        );
        assert_eq!(history(&status)[0], (R2, "HealthCheckFailed"));
    }

    #[test]
    fn a_wait_superseded_by_a_new_revision_concludes_nothing() {
        // A new Kustomization parks for R1; R2 comes meanwhile, parks in its place, and is
        // healthy (tests/integration/health_parking.rs, the superseding test).
        let new = KustomizationStatus::default();
        let waiting_r1 = progress_status(&new, &parked(R1, &["w1"], 5));
        let progress = parked(R2, &["w1", "added"], 25);
        let waiting_r2 = progress_status(&waiting_r1, &progress);
        let checking = format!("Running health checks for revision {R2} with a timeout of 5m0s");
        assert_eq!(
            shown(&waiting_r2),
            [
                ("Reconciling", "True", "Progressing", checking.as_str()),
                ("Ready", "Unknown", "Progressing", "Reconciliation in progress"),
                ("Healthy", "Unknown", "Progressing", checking.as_str()),
            ]
        );
        assert_eq!(waiting_r2.last_attempted_revision.as_deref(), Some(R2));

        let done = applied(R2, "sha256:2", &["w1", "added"], Some(Duration::from_secs(3)));
        let status = status_after(
            &waiting_r1,
            &outcome(Some(&progress), Ending::Applied(&done)),
            &at(60),
        );
        let message = format!("Applied revision: {R2}");
        assert_eq!(
            shown(&status),
            [
                ("Ready", "True", "ReconciliationSucceeded", message.as_str()),
                ("Healthy", "True", "Succeeded", "Health check passed in 3s"),
            ]
        );
        assert_eq!(status.last_applied_revision.as_deref(), Some(R2));
        assert_eq!(
            history(&status),
            [(R2, "ReconciliationSucceeded")],
            "the superseded wait concluded nothing"
        );
    }

    #[test]
    fn a_suspended_pass_only_records_the_request_it_handled() {
        let old = ready_at_r1();
        let handled = PassOutcome {
            requested_at: Some("2026-01-01T00:10:00Z"),
            ..outcome(None, Ending::Suspended)
        };
        let status = status_after(&old, &handled, &at(600));
        assert_eq!(
            status.last_handled_reconcile_at.as_deref(),
            Some("2026-01-01T00:10:00Z")
        );
        assert_eq!(
            KustomizationStatus {
                last_handled_reconcile_at: None,
                ..status
            },
            old
        );
    }
}
