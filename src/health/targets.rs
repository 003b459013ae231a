//! The one builder of the objects a reconcile waits for: with `spec.wait` every object the
//! apply wrote or found unchanged, otherwise the `spec.healthChecks` entries with Flux's
//! defaults. Pure.

use crate::api::Kustomization;
use crate::api::inventory::ObjectRef;
use crate::api::kustomization::{NamespacedObjectKindReference, given};

use super::wait::WaitTarget;

/// The objects to wait for after an apply. `applied` lists `(apiVersion, object, current)` of
/// what the apply wrote or found unchanged (skipped objects left out: nothing of ours changed
/// them), `current` when the object is Current as soon as its write returned. `None` when
/// nothing is checked (no `wait`, no `healthChecks`, nothing applied); otherwise the targets,
/// the Kustomization itself left out as Flux does (the flux-system bootstrap applies its own
/// Kustomization, which cannot be Ready while it waits): possibly none.
pub(crate) fn wait_targets<'a>(
    ks: &Kustomization,
    applied: impl IntoIterator<Item = (&'a str, &'a ObjectRef, bool)>,
) -> Option<Vec<WaitTarget>> {
    let targets: Vec<WaitTarget> = if ks.spec.wait {
        applied
            .into_iter()
            .map(|(api_version, object, current)| {
                let namespace = (!object.namespace.is_empty()).then_some(object.namespace.as_str());
                WaitTarget {
                    current_as_applied: current,
                    ..WaitTarget::new(api_version, &object.kind, namespace, &object.name)
                }
            })
            .collect()
    } else {
        ks.spec
            .health_checks
            .iter()
            .map(health_check_target(ks))
            .collect()
    };
    if targets.is_empty() {
        return None;
    }
    let namespace = ks.metadata.namespace.as_deref().unwrap_or_default();
    let name = ks.metadata.name.as_deref().unwrap_or_default();
    let is_self = |t: &WaitTarget| {
        t.kind == "Kustomization" && t.name == name && t.namespace.as_deref() == Some(namespace)
    };
    Some(targets.into_iter().filter(|t| !is_self(t)).collect())
}

/// A `spec.healthChecks` entry of `ks` as a target: `apiVersion` defaults to `apps/v1` (what
/// Flux's v1beta1 API assumed, still honoured), `namespace` to the Kustomization's.
fn health_check_target(ks: &Kustomization) -> impl Fn(&NamespacedObjectKindReference) -> WaitTarget + '_ {
    let ks_namespace = ks.metadata.namespace.as_deref().unwrap_or_default();
    move |check| {
        let api_version = given(check.api_version.as_deref()).unwrap_or("apps/v1");
        let namespace = given(check.namespace.as_deref()).unwrap_or(ks_namespace);
        WaitTarget::new(api_version, &check.kind, Some(namespace), &check.name)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ks(spec: serde_json::Value) -> Kustomization {
        let mut full = json!({"interval": "5m", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "repo"}});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"}, "spec": full
        }))
        .unwrap()
    }

    fn shown(targets: Option<Vec<WaitTarget>>) -> Vec<String> {
        let targets = targets.expect("a health check");
        targets.iter().map(|t| format!("{} {t}", t.api_version)).collect()
    }

    #[test]
    fn health_checks_default_api_version_and_namespace_and_skip_the_kustomization_itself() {
        let ks = ks(json!({"healthChecks": [
            {"kind": "Deployment", "name": "web"},
            {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "name": "db", "namespace": "data"},
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "name": "apps"},
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "name": "infra"}
        ]}));
        let applied = ObjectRef::new("", "ConfigMap", "flux-system", "ignored");
        assert_eq!(
            shown(wait_targets(&ks, [("v1", &applied, false)])),
            [
                "apps/v1 Deployment/flux-system/web",
                "helm.toolkit.fluxcd.io/v2 HelmRelease/data/db",
                "kustomize.toolkit.fluxcd.io/v1 Kustomization/flux-system/infra"
            ]
        );
    }

    #[test]
    fn wait_takes_every_applied_object_and_no_health_check() {
        let ks = ks(json!({"wait": true, "healthChecks": [{"kind": "Deployment", "name": "other"}]}));
        let namespace = ObjectRef::new("", "Namespace", "", "apps");
        let web = ObjectRef::new("apps", "Deployment", "apps", "web");
        assert_eq!(
            shown(wait_targets(
                &ks,
                [("v1", &namespace, false), ("apps/v1", &web, false)]
            )),
            ["v1 Namespace/apps", "apps/v1 Deployment/apps/web"]
        );
    }

    // Before, `wait: true` over a tree holding the Kustomization itself (flux-system's
    // bootstrap) waited on its own Ready, which stays Unknown while it waits, until the
    // timeout.
    #[test]
    fn wait_leaves_the_kustomization_itself_out() {
        let ks = ks(json!({"wait": true}));
        let itself = ObjectRef::new(
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "flux-system",
            "apps",
        );
        let other = ObjectRef::new(
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "flux-system",
            "infra",
        );
        let same_name = ObjectRef::new("kustomize.toolkit.fluxcd.io", "Kustomization", "apps", "apps");
        let kustomize_v1 = "kustomize.toolkit.fluxcd.io/v1";
        assert_eq!(
            shown(wait_targets(
                &ks,
                [
                    (kustomize_v1, &itself, false),
                    (kustomize_v1, &other, false),
                    (kustomize_v1, &same_name, false)
                ]
            )),
            [
                "kustomize.toolkit.fluxcd.io/v1 Kustomization/flux-system/infra",
                "kustomize.toolkit.fluxcd.io/v1 Kustomization/apps/apps"
            ]
        );
        // Only itself: a check with nothing to wait for (Flux reports it passed).
        assert_eq!(wait_targets(&ks, [(kustomize_v1, &itself, false)]), Some(vec![]));
    }

    #[test]
    fn nothing_to_wait_for_without_wait_or_health_checks() {
        let web = ObjectRef::new("apps", "Deployment", "apps", "web");
        assert!(wait_targets(&ks(json!({})), [("apps/v1", &web, false)]).is_none());
        assert!(wait_targets(&ks(json!({"wait": true})), []).is_none());
    }
}
