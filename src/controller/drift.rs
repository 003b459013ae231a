//! The `kustomize.toolkit.fluxcd.io/drift` annotation of a Kustomization (ours; the CRD stays
//! Flux's). With `correct`, an out-of-band change to one of its objects, seen by the shared
//! metadata watches, reconciles it at once instead of at the next interval. Without the
//! annotation (or with any other value) drift is corrected at the interval, as Flux does.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use crate::api::Kustomization;
use crate::api::conditions::keys;
use crate::applier::Owner;

/// What a Kustomization asks to be done about drift, beyond Flux's correction at the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriftMode {
    /// Correct an out-of-band change at once.
    Correct,
}

/// The mode the annotation asks for; `None` is Flux's behaviour.
pub(crate) fn mode(ks: &Kustomization) -> Option<DriftMode> {
    match ks.annotations().get(keys::DRIFT_ANNOTATION).map(String::as_str) {
        Some("correct") => Some(DriftMode::Correct),
        _ => None,
    }
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
    use serde_json::json;

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
            ks("flux", None, false),
            ks("typo", Some("corect"), false),
            ks("suspended", Some("correct"), true),
        ];
        let names: Vec<String> = ["correct", "flux", "typo", "suspended", "gone"]
            .into_iter()
            .filter_map(|name| to_reconcile(&all, &Owner::new(name, "apps")))
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["correct"]);
        assert_eq!(
            to_reconcile(&all, &Owner::new("correct", "other")),
            None,
            "the owner's namespace counts"
        );
    }
}
