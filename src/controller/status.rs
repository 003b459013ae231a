//! The status of a Kustomization, computed from what the reconcile steps did. Pure: no I/O, no
//! clock (callers pass `now`), so every rule here has a table test against Flux's behaviour.
//!
//! The condition setters are Flux's, shared by every controller (`flux_runtime::conditions`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub use flux_runtime::conditions::find;
pub(crate) use flux_runtime::conditions::{
    FALSE, Stamp, TRUE, UNKNOWN, delete_condition, is_true, mark_reconciling, mark_stalled, set_condition,
};

use crate::api::ResourceInventory;
use crate::api::conditions::{HEALTHY, READY, RECONCILING, reason};
use crate::api::duration;
use crate::api::kustomization::{KustomizationStatus, Snapshot};

/// `status.history` keeps this many snapshots.
const MAX_HISTORY: usize = 5;

/// The step a running reconcile is in, as the Reconciling message tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Fetching,
    Building,
    DetectingDrift,
    HealthChecks,
}

impl Progress {
    /// Flux's Reconciling message for this step.
    pub fn message(self, revision: &str, timeout: Duration) -> String {
        let step = match self {
            Self::Fetching => "Fetching manifests",
            Self::Building => "Building manifests",
            Self::DetectingDrift => "Detecting drift",
            Self::HealthChecks => "Running health checks",
        };
        format!(
            "{step} for revision {revision} with a timeout of {}",
            duration::format(timeout)
        )
    }
}

/// The Ready message of a successful reconcile.
pub(crate) fn applied_message(revision: &str) -> String {
    format!("Applied revision: {revision}")
}

/// The Healthy message of passed health checks.
pub(crate) fn health_passed_message(elapsed: Duration) -> String {
    format!("Health check passed in {}", duration::format(elapsed))
}

/// The progress status written when a reconcile starts new work (a new revision or a new
/// generation): Ready=Unknown and Reconciling=True saying which step runs.
pub(crate) fn mark_progress(
    status: &mut KustomizationStatus,
    stamp: &Stamp,
    step: Progress,
    revision: &str,
    timeout: Duration,
) {
    set_condition(
        &mut status.conditions,
        stamp,
        READY,
        UNKNOWN,
        reason::PROGRESSING,
        "Reconciliation in progress",
    );
    mark_reconciling(
        &mut status.conditions,
        stamp,
        reason::PROGRESSING,
        &step.message(revision, timeout),
    );
}

/// The status while health checks run off the worker, as Flux writes it before its wait:
/// Ready=Unknown, Reconciling and Healthy=Unknown saying which revision is checked, and the
/// inventory of what was just applied (a deletion meanwhile prunes that).
pub(crate) fn mark_health_checks(
    status: &mut KustomizationStatus,
    stamp: &Stamp,
    revision: &str,
    timeout: Duration,
    inventory: Option<ResourceInventory>,
) {
    mark_progress(status, stamp, Progress::HealthChecks, revision, timeout);
    set_condition(
        &mut status.conditions,
        stamp,
        HEALTHY,
        UNKNOWN,
        reason::PROGRESSING,
        &Progress::HealthChecks.message(revision, timeout),
    );
    if inventory.is_some() {
        status.inventory = inventory;
    }
}

/// Flux's end-of-reconcile bookkeeping (`finalizeStatus`).
pub(crate) fn finalize_status(status: &mut KustomizationStatus, stamp: &Stamp, requested_at: Option<&str>) {
    if let Some(requested_at) = requested_at {
        status.last_handled_reconcile_at = Some(requested_at.to_string());
    }
    if is_true(&status.conditions, READY) {
        delete_condition(&mut status.conditions, RECONCILING);
        status.observed_generation = stamp.generation;
    } else if find(&status.conditions, READY).is_some_and(|c| c.status == FALSE)
        && let Some(reconciling) = status.conditions.iter_mut().find(|c| c.type_ == RECONCILING)
    {
        // Only the reason changes; the message keeps the step that failed.
        reconciling.reason = reason::PROGRESSING_WITH_RETRY.to_string();
    }
}

/// A reconcile that applied the revision.
#[derive(Clone, Debug)]
pub(crate) struct Applied {
    pub revision: String,
    pub origin_revision: Option<String>,
    pub inventory: ResourceInventory,
    /// `sha256:<hex>` of the built manifests, the history key.
    pub digest: String,
    /// `None` when neither `wait` nor `healthChecks` is set.
    pub health: Option<Duration>,
    pub duration: Duration,
    /// A line naming drifted objects left in place, added to the Ready message.
    pub drift: Option<String>,
}

/// Records a fully successful reconcile.
pub(crate) fn mark_applied(status: &mut KustomizationStatus, stamp: &Stamp, applied: &Applied) {
    if let Some(elapsed) = applied.health {
        set_condition(
            &mut status.conditions,
            stamp,
            HEALTHY,
            TRUE,
            reason::SUCCEEDED,
            &health_passed_message(elapsed),
        );
    } else {
        delete_condition(&mut status.conditions, HEALTHY);
    }
    set_condition(
        &mut status.conditions,
        stamp,
        READY,
        TRUE,
        reason::RECONCILIATION_SUCCEEDED,
        &match &applied.drift {
            Some(drift) => format!("{}\n{drift}", applied_message(&applied.revision)),
            None => applied_message(&applied.revision),
        },
    );
    status.inventory = Some(applied.inventory.clone());
    status.last_applied_revision = Some(applied.revision.clone());
    status.last_applied_origin_revision = applied.origin_revision.clone();
    status.last_attempted_revision = Some(applied.revision.clone());
    let metadata = snapshot_metadata(&applied.revision, applied.origin_revision.as_deref());
    upsert_history(
        &mut status.history,
        stamp,
        &applied.digest,
        reason::RECONCILIATION_SUCCEEDED,
        metadata,
        applied.duration,
    );
}

/// A reconcile that failed in one of its steps.
#[derive(Clone, Debug, Default)]
pub(crate) struct Failed {
    /// A Ready reason from `api::conditions::reason`.
    pub reason: &'static str,
    pub message: String,
    /// A configuration error: Stalled until the spec changes.
    pub terminal: bool,
    /// Set when the build succeeded, so the failure is recorded in the history.
    pub build: Option<BuiltRevision>,
    /// The inventory to keep: objects applied before the failure, or stale objects whose
    /// prune was not confirmed. `None` leaves the inventory as it was.
    pub inventory: Option<ResourceInventory>,
    /// The Healthy=False message, when health checks ran and failed.
    pub unhealthy: Option<String>,
}

/// What identifies a built revision in the history.
#[derive(Clone, Debug)]
pub(crate) struct BuiltRevision {
    pub digest: String,
    pub revision: String,
    pub origin_revision: Option<String>,
    pub duration: Duration,
}

/// Records a failed reconcile.
pub(crate) fn mark_failed(status: &mut KustomizationStatus, stamp: &Stamp, failed: &Failed) {
    set_condition(
        &mut status.conditions,
        stamp,
        READY,
        FALSE,
        failed.reason,
        &failed.message,
    );
    if failed.terminal {
        mark_stalled(&mut status.conditions, stamp, failed.reason, &failed.message);
        // Flux observes the generation on terminal errors: retrying it cannot help.
        status.observed_generation = stamp.generation;
    }
    if let Some(unhealthy) = &failed.unhealthy {
        set_condition(
            &mut status.conditions,
            stamp,
            HEALTHY,
            FALSE,
            reason::HEALTH_CHECK_FAILED,
            unhealthy,
        );
    }
    if let Some(inventory) = &failed.inventory {
        status.inventory = Some(inventory.clone());
    }
    if let Some(build) = &failed.build {
        let metadata = snapshot_metadata(&build.revision, build.origin_revision.as_deref());
        upsert_history(
            &mut status.history,
            stamp,
            &build.digest,
            failed.reason,
            metadata,
            build.duration,
        );
    }
}

fn snapshot_metadata(
    revision: &str,
    origin_revision: Option<&str>,
) -> std::collections::BTreeMap<String, String> {
    let mut metadata = std::collections::BTreeMap::from([("revision".to_string(), revision.to_string())]);
    if let Some(origin) = origin_revision.filter(|o| !o.is_empty()) {
        metadata.insert("originRevision".to_string(), origin.to_string());
    }
    metadata
}

/// Flux's history upsert: an entry with the same digest and status is bumped and moved to the
/// front; otherwise a new entry is prepended; at most five are kept.
pub(crate) fn upsert_history(
    history: &mut Vec<Snapshot>,
    stamp: &Stamp,
    digest: &str,
    status: &str,
    metadata: std::collections::BTreeMap<String, String>,
    elapsed: Duration,
) {
    let now = stamp.time();
    let elapsed = duration::format(elapsed);
    let entry = match history
        .iter()
        .position(|s| s.digest == digest && s.last_reconciled_status == status)
    {
        Some(index) => {
            let mut entry = history.remove(index);
            entry.last_reconciled = now;
            entry.last_reconciled_duration = elapsed;
            entry.total_reconciliations += 1;
            entry.metadata = metadata;
            entry
        }
        None => Snapshot {
            digest: digest.to_string(),
            first_reconciled: now.clone(),
            last_reconciled: now,
            last_reconciled_duration: elapsed,
            last_reconciled_status: status.to_string(),
            total_reconciliations: 1,
            metadata,
        },
    };
    history.insert(0, entry);
    history.truncate(MAX_HISTORY);
}

/// Within one pass a condition may change and change back (Ready goes Unknown while working,
/// then True again); measured against the stored status it did not transition, so it keeps
/// the stored `lastTransitionTime`.
pub(crate) fn keep_transition_times(stored: &KustomizationStatus, status: &mut KustomizationStatus) {
    for condition in &mut status.conditions {
        if let Some(before) = find(&stored.conditions, &condition.type_)
            && before.status == condition.status
            && before.reason == condition.reason
            && before.message == condition.message
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
}

/// Whether two statuses say the same thing once times and counters are ignored. A reconcile
/// whose result compares equal to the stored status writes nothing: on a quiet interval only
/// the clock moved.
pub(crate) fn same_ignoring_time(a: &KustomizationStatus, b: &KustomizationStatus) -> bool {
    normalized(a) == normalized(b)
}

fn normalized(status: &KustomizationStatus) -> KustomizationStatus {
    let epoch = Time(Timestamp::UNIX_EPOCH);
    let mut status = status.clone();
    for condition in &mut status.conditions {
        condition.last_transition_time = epoch.clone();
    }
    for snapshot in &mut status.history {
        snapshot.first_reconciled = epoch.clone();
        snapshot.last_reconciled = epoch.clone();
        snapshot.last_reconciled_duration.clear();
        snapshot.total_reconciliations = 0;
    }
    status
}

#[cfg(test)]
mod tests {
    use flux_runtime::conditions::STALLED;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;
    use crate::api::ResourceRef;

    fn stamp(generation: i64, second: i64) -> Stamp {
        Stamp {
            generation,
            now: Timestamp::from_second(1_767_225_600 + second).unwrap(),
        }
    }

    fn types(conditions: &[Condition]) -> Vec<&str> {
        conditions.iter().map(|c| c.type_.as_str()).collect()
    }

    #[test]
    fn reconciling_messages_match_flux() {
        let rev = "main@sha1:1f3c0d9e2b7a4c5d6e7f8091a2b3c4d5e6f70812";
        let timeout = Duration::from_secs(270);
        assert_eq!(
            Progress::Fetching.message(rev, timeout),
            "Fetching manifests for revision main@sha1:1f3c0d9e2b7a4c5d6e7f8091a2b3c4d5e6f70812 with a timeout of 4m30s"
        );
        assert_eq!(
            Progress::Building.message(rev, timeout),
            "Building manifests for revision main@sha1:1f3c0d9e2b7a4c5d6e7f8091a2b3c4d5e6f70812 with a timeout of 4m30s"
        );
        assert_eq!(
            Progress::DetectingDrift.message("r", Duration::from_secs(3600)),
            "Detecting drift for revision r with a timeout of 1h0m0s"
        );
        assert_eq!(
            applied_message(rev),
            "Applied revision: main@sha1:1f3c0d9e2b7a4c5d6e7f8091a2b3c4d5e6f70812"
        );
    }

    #[test]
    fn health_checks_off_the_worker_show_what_flux_shows_during_its_wait() {
        let rev = "main@sha1:2222222222222222222222222222222222222222";
        let mut status = KustomizationStatus::default();
        set_condition(
            &mut status.conditions,
            &stamp(1, 0),
            READY,
            TRUE,
            "ReconciliationSucceeded",
            "Applied revision: r1",
        );
        let inventory = ResourceInventory {
            entries: vec![ResourceRef {
                id: "apps_web_apps_Deployment".into(),
                v: "v1".into(),
            }],
        };
        mark_health_checks(
            &mut status,
            &stamp(2, 5),
            rev,
            Duration::from_secs(300),
            Some(inventory.clone()),
        );
        let shown: Vec<_> = status
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.as_str(),
                    c.message.as_str(),
                    c.observed_generation,
                )
            })
            .collect();
        let checking = "Running health checks for revision main@sha1:2222222222222222222222222222222222222222 with a timeout of 5m0s";
        assert_eq!(
            shown,
            [
                ("Reconciling", "True", "Progressing", checking, Some(2)),
                (
                    "Ready",
                    "Unknown",
                    "Progressing",
                    "Reconciliation in progress",
                    Some(2)
                ),
                ("Healthy", "Unknown", "Progressing", checking, Some(2)),
            ]
        );
        assert_eq!(
            status.inventory,
            Some(inventory),
            "a deletion meanwhile prunes what was applied"
        );
        assert_eq!(status.last_applied_revision, None, "applied only once healthy");
    }

    fn applied(revision: &str, digest: &str) -> Applied {
        Applied {
            revision: revision.into(),
            origin_revision: None,
            inventory: ResourceInventory {
                entries: vec![ResourceRef {
                    id: "apps_web__Service".into(),
                    v: "v1".into(),
                }],
            },
            digest: digest.into(),
            health: None,
            duration: Duration::from_millis(7200),
            drift: None,
        }
    }

    /// A reconcile that applied `done`, as the reconciler records it: Ready, then finalized.
    fn succeed(status: &mut KustomizationStatus, stamp: &Stamp, done: &Applied) {
        mark_applied(status, stamp, done);
        finalize_status(status, stamp, None);
    }

    /// A reconcile that ended in `failed`, as the reconciler records it.
    fn fail(status: &mut KustomizationStatus, stamp: &Stamp, failed: &Failed) {
        mark_failed(status, stamp, failed);
        finalize_status(status, stamp, None);
    }

    /// The status after one successful reconcile of `revision` at `stamp`.
    fn succeeded(stamp: &Stamp, revision: &str, digest: &str) -> KustomizationStatus {
        let mut status = KustomizationStatus::default();
        succeed(&mut status, stamp, &applied(revision, digest));
        status
    }

    /// Enters `step` of a reconcile of `revision` with a timeout of `timeout_secs`.
    fn progress(
        status: &mut KustomizationStatus,
        stamp: &Stamp,
        step: Progress,
        revision: &str,
        timeout_secs: u64,
    ) {
        mark_progress(status, stamp, step, revision, Duration::from_secs(timeout_secs));
    }

    /// A retryable failure before anything was built: no history entry, the inventory kept.
    fn failure(reason: &'static str, message: &str) -> Failed {
        Failed {
            reason,
            message: message.into(),
            terminal: false,
            build: None,
            inventory: None,
            unhealthy: None,
        }
    }

    /// Records a reconcile of `digest` with `status` at second `second`, taking one second.
    fn record(history: &mut Vec<Snapshot>, second: i64, digest: &str, status: &str) {
        upsert_history(
            history,
            &stamp(1, second),
            digest,
            status,
            Default::default(),
            Duration::from_secs(1),
        );
    }

    #[test]
    fn success_after_progress_matches_the_reference_status() {
        // Reference A.1: Ready=True with the revision, no Reconciling, observedGeneration set.
        let rev = "main@sha1:1f3c0d9e2b7a4c5d6e7f8091a2b3c4d5e6f70812";
        let mut status = KustomizationStatus::default();
        progress(&mut status, &stamp(3, 0), Progress::Fetching, rev, 270);
        assert_eq!(types(&status.conditions), [RECONCILING, READY]);
        assert_eq!(status.conditions[1].status, UNKNOWN);
        assert_eq!(status.conditions[1].message, "Reconciliation in progress");

        let mut done = applied(rev, "sha256:9b2c");
        done.health = Some(Duration::from_nanos(5_012_345_678));
        mark_applied(&mut status, &stamp(3, 5), &done);
        finalize_status(&mut status, &stamp(3, 5), Some("1767225600"));

        assert_eq!(types(&status.conditions), [READY, HEALTHY]);
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            (TRUE, "ReconciliationSucceeded")
        );
        assert_eq!(ready.message, format!("Applied revision: {rev}"));
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(
            status.conditions[1].message,
            "Health check passed in 5.012345678s"
        );
        assert_eq!(status.conditions[1].reason, "Succeeded");
        assert_eq!(status.observed_generation, 3);
        assert_eq!(status.last_applied_revision.as_deref(), Some(rev));
        assert_eq!(status.last_attempted_revision.as_deref(), Some(rev));
        assert_eq!(status.last_handled_reconcile_at.as_deref(), Some("1767225600"));
        assert_eq!(
            status.inventory.as_ref().unwrap().entries[0].id,
            "apps_web__Service"
        );
        let snapshot = &status.history[0];
        assert_eq!(snapshot.last_reconciled_status, "ReconciliationSucceeded");
        assert_eq!(snapshot.last_reconciled_duration, "7.2s");
        assert_eq!(snapshot.total_reconciliations, 1);
        assert_eq!(snapshot.metadata.get("revision").map(String::as_str), Some(rev));
        assert!(!snapshot.metadata.contains_key("originRevision"));
    }

    #[test]
    fn failure_keeps_generation_and_inventory_and_retries() {
        // Reference A.2: Ready=False, Reconciling=True ProgressingWithRetry with the step message.
        let mut status = succeeded(&stamp(2, 0), "r1", "sha256:a");
        let inventory = status.inventory.clone();

        progress(&mut status, &stamp(2, 10), Progress::DetectingDrift, "r2", 270);
        let failed = Failed {
            build: Some(BuiltRevision {
                digest: "sha256:b".into(),
                revision: "r2".into(),
                origin_revision: None,
                duration: Duration::from_secs(1),
            }),
            ..failure(
                reason::RECONCILIATION_FAILED,
                "Deployment/apps/web dry-run failed (Invalid): spec.template: Required value",
            )
        };
        fail(&mut status, &stamp(3, 12), &failed);

        assert_eq!(types(&status.conditions), [RECONCILING, READY]);
        let reconciling = &status.conditions[0];
        assert_eq!(reconciling.reason, "ProgressingWithRetry");
        assert_eq!(
            reconciling.message,
            "Detecting drift for revision r2 with a timeout of 4m30s"
        );
        assert_eq!(status.conditions[1].reason, "ReconciliationFailed");
        assert_eq!(status.observed_generation, 2, "not advanced on ordinary failures");
        assert_eq!(status.inventory, inventory);
        assert_eq!(status.last_applied_revision.as_deref(), Some("r1"));
        let history: Vec<_> = status
            .history
            .iter()
            .map(|s| (s.digest.as_str(), s.last_reconciled_status.as_str()))
            .collect();
        assert_eq!(
            history,
            [
                ("sha256:b", "ReconciliationFailed"),
                ("sha256:a", "ReconciliationSucceeded")
            ]
        );
    }

    #[test]
    fn terminal_failure_stalls_and_observes_the_generation() {
        let mut status = KustomizationStatus::default();
        progress(&mut status, &stamp(4, 0), Progress::Fetching, "r", 30);
        let failed = Failed {
            terminal: true,
            ..failure(
                reason::ACCESS_DENIED,
                "can't access 'GitRepository/other/repo', cross-namespace references have been blocked",
            )
        };
        fail(&mut status, &stamp(4, 1), &failed);
        assert_eq!(types(&status.conditions), [STALLED, READY]);
        assert_eq!(status.conditions[0].reason, "AccessDenied");
        assert_eq!(status.observed_generation, 4);
        assert!(status.history.is_empty(), "nothing was built");
    }

    #[test]
    fn a_round_trip_through_progress_keeps_the_stored_transition_time() {
        let stored = succeeded(&stamp(1, 0), "r1", "sha256:a");

        let mut status = stored.clone();
        progress(&mut status, &stamp(1, 60), Progress::Fetching, "r1", 30);
        succeed(&mut status, &stamp(1, 61), &applied("r1", "sha256:a"));
        assert_eq!(
            status.conditions[0].last_transition_time,
            stamp(1, 61).time(),
            "the setter saw Unknown -> True"
        );
        keep_transition_times(&stored, &mut status);
        assert_eq!(status.conditions[0].last_transition_time, stamp(1, 0).time());

        // A real change keeps the new time.
        let mut failed = stored.clone();
        mark_failed(
            &mut failed,
            &stamp(1, 70),
            &failure(reason::BUILD_FAILED, "kustomization.yaml: bad"),
        );
        keep_transition_times(&stored, &mut failed);
        assert_eq!(failed.conditions[0].last_transition_time, stamp(1, 70).time());
    }

    #[test]
    fn history_bumps_same_digest_and_status_and_keeps_five() {
        let mut history = Vec::new();
        for (second, digest) in [(0, "a"), (1, "b"), (2, "a")] {
            record(&mut history, second, digest, "ReconciliationSucceeded");
        }
        let view: Vec<_> = history
            .iter()
            .map(|s| (s.digest.as_str(), s.total_reconciliations))
            .collect();
        assert_eq!(view, [("a", 2), ("b", 1)]);
        assert_eq!(history[0].first_reconciled, stamp(1, 0).time());
        assert_eq!(history[0].last_reconciled, stamp(1, 2).time());

        // Same digest, other status: a new entry.
        record(&mut history, 3, "a", "HealthCheckFailed");
        assert_eq!(history.len(), 3);
        for (second, digest) in [(4, "c"), (5, "d"), (6, "e"), (7, "f")] {
            record(&mut history, second, digest, "ReconciliationSucceeded");
        }
        let digests: Vec<_> = history.iter().map(|s| s.digest.as_str()).collect();
        assert_eq!(digests, ["f", "e", "d", "c", "a"]);
    }

    #[test]
    fn a_quiet_interval_compares_equal_and_a_change_does_not() {
        let before = succeeded(&stamp(1, 0), "r1", "sha256:a");

        let mut quiet = before.clone();
        succeed(&mut quiet, &stamp(1, 600), &applied("r1", "sha256:a"));
        assert!(same_ignoring_time(&before, &quiet));

        let mut requested = before.clone();
        finalize_status(&mut requested, &stamp(1, 600), Some("now"));
        assert!(!same_ignoring_time(&before, &requested));

        let mut new_revision = before.clone();
        mark_applied(&mut new_revision, &stamp(1, 600), &applied("r2", "sha256:b"));
        assert!(!same_ignoring_time(&before, &new_revision));
    }
}
