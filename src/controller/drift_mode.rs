//! The `kustomize.toolkit.fluxcd.io/drift` annotation of a Kustomization (ours; the CRD stays
//! Flux's). With `correct`, an out-of-band change to one of its objects, seen by the shared
//! metadata watches, reconciles it at once instead of at the next interval. With `warn`, the
//! pass that follows at once (and every later one) leaves drifted objects as they are, names
//! them and their fields in a line of the Ready message, and announces a new set of them with
//! one Warning event. Without the annotation (or with any other value) drift is corrected at the
//! interval, as Flux does.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use super::events::Notice;
use super::status;
use crate::api::Kustomization;
use crate::api::conditions::{READY, keys, reason};
use crate::api::kustomization::KustomizationStatus;
use crate::applier::{DriftPolicy, DriftReport, Owner};

/// What a Kustomization asks to be done about drift, beyond Flux's correction at the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriftMode {
    /// Correct an out-of-band change at once.
    Correct,
    /// Report drift, never correct it.
    Warn,
}

/// The Warning event reason of a new set of drifted objects.
const DRIFT_DETECTED: &str = "DriftDetected";

/// How the drift line of the Ready message starts.
const DRIFT_LINE: &str = "Drift left in place";

/// The mode the annotation asks for; `None` is Flux's behaviour.
pub(crate) fn mode(ks: &Kustomization) -> Option<DriftMode> {
    match ks.annotations().get(keys::DRIFT_ANNOTATION).map(String::as_str) {
        Some("correct") => Some(DriftMode::Correct),
        Some("warn") => Some(DriftMode::Warn),
        _ => None,
    }
}

/// The applier's policy for this pass. `digest`: the build being applied; whether the last
/// successful pass applied the same one tells drift from change when the applier remembers no
/// applied manifests (after a restart). A failed pass since then does not change that: what it
/// did not apply is still what the successful one left.
pub(crate) fn policy(ks: &Kustomization, old: &KustomizationStatus, digest: &str) -> DriftPolicy {
    if mode(ks) != Some(DriftMode::Warn) {
        return DriftPolicy::Correct;
    }
    // the history is newest first
    let last_success = old
        .history
        .iter()
        .find(|h| h.last_reconciled_status == reason::RECONCILIATION_SUCCEEDED);
    DriftPolicy::Warn {
        same_build: last_success.is_some_and(|h| h.digest == digest),
    }
}

/// The line of the Ready message naming the drifted objects left in place, if any.
pub(crate) fn ready_line(reports: &[DriftReport]) -> Option<String> {
    if reports.is_empty() {
        return None;
    }
    let objects: Vec<String> = reports.iter().map(ToString::to_string).collect();
    Some(format!(
        "{DRIFT_LINE} ({}: warn): {}",
        keys::DRIFT_ANNOTATION,
        objects.join("; ")
    ))
}

fn drift_line(status: &KustomizationStatus) -> Option<&str> {
    let ready = status::find(&status.conditions, READY)?;
    ready.message.lines().find(|l| l.starts_with(DRIFT_LINE))
}

/// The Warning event for a set of drifted objects the stored status did not name yet.
pub(crate) fn notice(
    old: &KustomizationStatus,
    new: &KustomizationStatus,
    metadata: BTreeMap<String, String>,
) -> Option<Notice> {
    let line = drift_line(new)?;
    (drift_line(old) != Some(line)).then(|| Notice::error(DRIFT_DETECTED, line, metadata))
}

/// The Kustomization that owns a changed object, when it wants to hear about it now: it asks
/// for a drift mode, is not suspended and is not being deleted.
pub(crate) fn to_reconcile(
    kustomizations: &[Arc<Kustomization>],
    owner: &Owner,
) -> Option<ObjectRef<Kustomization>> {
    kustomizations
        .iter()
        .find(|ks| ks.name_any() == owner.name && ks.namespace().as_deref() == Some(owner.namespace.as_str()))
        .filter(|ks| mode(ks).is_some() && !ks.spec.suspend && ks.metadata.deletion_timestamp.is_none())
        .map(|ks| ObjectRef::from_obj(ks.as_ref()))
}

/// The reconciles that out-of-band changes call for. Repeated changes while a reconcile is
/// pending or running are merged by the controller's queue into one more pass.
pub(crate) fn triggers(
    changes: mpsc::Receiver<Owner>,
    kustomizations: Store<Kustomization>,
) -> impl Stream<Item = ObjectRef<Kustomization>> + Send + 'static {
    futures::stream::unfold(changes, |mut changes| async move {
        changes.recv().await.map(|owner| (owner, changes))
    })
    .filter_map(move |owner| std::future::ready(to_reconcile(&kustomizations.state(), &owner)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inventory::ObjectRef;
    use crate::applier::Drift;
    use serde_json::json;

    fn status(ready: &str, message: &str, digest: &str) -> KustomizationStatus {
        serde_json::from_value(json!({
            "conditions": [{"type": "Ready", "status": ready, "reason": "ReconciliationSucceeded",
                "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "history": [{"digest": digest, "firstReconciled": "2026-01-01T00:00:00Z",
                "lastReconciled": "2026-01-01T00:00:00Z", "lastReconciledDuration": "1s",
                "lastReconciledStatus": "ReconciliationSucceeded", "totalReconciliations": 1}],
        }))
        .unwrap()
    }

    #[test]
    fn warn_tells_drift_from_change_by_the_last_successful_build() {
        let warn = ks("app", Some("warn"), false);
        let applied = status("True", "Applied revision: r1", "sha256:a");
        assert_eq!(
            policy(&warn, &applied, "sha256:a"),
            DriftPolicy::Warn { same_build: true }
        );
        assert_eq!(
            policy(&warn, &applied, "sha256:b"),
            DriftPolicy::Warn { same_build: false }
        );
        // a failed pass after it (an API error under load) leaves the last success as it was
        let mut failed = applied.clone();
        failed.history.insert(0, {
            let mut entry = failed.history[0].clone();
            entry.digest = "sha256:b".into();
            entry.last_reconciled_status = "ReconciliationFailed".into();
            entry
        });
        assert_eq!(
            policy(&warn, &failed, "sha256:a"),
            DriftPolicy::Warn { same_build: true }
        );
        assert_eq!(
            policy(&warn, &failed, "sha256:b"),
            DriftPolicy::Warn { same_build: false },
            "a build that never succeeded is a change"
        );
        let correct = ks("app", Some("correct"), false);
        assert_eq!(policy(&correct, &applied, "sha256:a"), DriftPolicy::Correct);
    }

    #[test]
    fn a_new_set_of_drifted_objects_warns_once() {
        let report = |name: &str, drift: Drift| DriftReport {
            object: ObjectRef::new("", "ConfigMap", "apps", name),
            drift,
        };
        let line = ready_line(&[
            report("a", Drift::Changed(vec!["data.value".into()])),
            report("b", Drift::Missing),
        ])
        .unwrap();
        assert_eq!(
            line,
            "Drift left in place (kustomize.toolkit.fluxcd.io/drift: warn): ConfigMap/apps/a (data.value); ConfigMap/apps/b (deleted)"
        );
        assert_eq!(ready_line(&[]), None);
        let clean = status("True", "Applied revision: r1", "sha256:a");
        let drifted = status("True", &format!("Applied revision: r1\n{line}"), "sha256:a");
        let warned = notice(&clean, &drifted, BTreeMap::new()).expect("a new set warns");
        assert_eq!(
            (warned.reason.as_str(), warned.message.as_str()),
            (DRIFT_DETECTED, line.as_str())
        );
        assert!(
            notice(&drifted, &drifted, BTreeMap::new()).is_none(),
            "the same set: no event"
        );
        assert!(
            notice(&drifted, &clean, BTreeMap::new()).is_none(),
            "drift gone: no warning"
        );
    }

    fn ks(name: &str, annotation: Option<&str>, suspend: bool) -> Arc<Kustomization> {
        let mut metadata = json!({"name": name, "namespace": "apps"});
        if let Some(value) = annotation {
            metadata["annotations"] = json!({keys::DRIFT_ANNOTATION: value});
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": metadata,
                "spec": {"interval": "5m", "prune": true, "suspend": suspend,
                    "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn only_kustomizations_asking_for_it_are_reconciled_at_once() {
        let all = [
            ks("correct", Some("correct"), false),
            ks("warn", Some("warn"), false),
            ks("flux", None, false),
            ks("typo", Some("corect"), false),
            ks("suspended", Some("correct"), true),
        ];
        let names: Vec<String> = ["correct", "warn", "flux", "typo", "suspended", "gone"]
            .into_iter()
            .filter_map(|name| to_reconcile(&all, &Owner::new(name, "apps")))
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["correct", "warn"]);
        assert_eq!(
            to_reconcile(&all, &Owner::new("correct", "other")),
            None,
            "the owner's namespace counts"
        );
    }
}
