//! Who applies: an impersonated ServiceAccount keeps its client, discovery and no-op
//! fingerprints between passes, like the controller's own identity.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use serde_json::json;

use crate::support::controller::{ControllerProcess, Scenario, condition};
use crate::support::eventually;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

/// A ServiceAccount `name` that may manage ConfigMaps in `namespace`, and nothing else.
pub async fn config_map_deployer(s: &Scenario, name: &str) {
    let n = s.namespace();
    let objects = [
        (
            ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": n}}),
        ),
        (
            ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": n},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}),
        ),
        (
            ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": n},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": n}]}),
        ),
    ];
    for (resource, object) in objects {
        Api::<DynamicObject>::namespaced_with(s.client.clone(), n, &resource)
            .patch(name, &PatchParams::apply("e2e-tests"), &Patch::Apply(object))
            .await
            .unwrap();
    }
}

/// The controller's API requests so far, by resource (every verb added up; discovery is "").
async fn requests_by_resource(controller: &ControllerProcess) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((_, resource), n) in controller.api_requests().await {
        *out.entry(resource).or_default() += n;
    }
    out
}

async fn successful_runs(controller: &ControllerProcess) -> f64 {
    controller
        .metric("kustomize_controller_reconciles_total{result=\"success\"}")
        .await
        .unwrap_or(0.0)
}

/// Requests a reconcile, as `flux reconcile` does, and waits until one more succeeded.
async fn reconcile_once(s: &Scenario, controller: &ControllerProcess, name: &str, token: &str) {
    let before = successful_runs(controller).await;
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
    Api::<Kustomization>::namespaced(s.client.clone(), s.namespace())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    eventually(
        "one more successful reconcile",
        Duration::from_secs(60),
        || async { (successful_runs(controller).await > before).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn an_impersonated_no_op_reconcile_costs_at_most_one_request_per_kind() {
    let s = Scenario::new("kc-tenant").await;
    config_map_deployer(&s, "deployer").await;
    let controller = s.start_controller(&["--default-service-account=deployer"]);
    let objects: Vec<String> = (0..100)
        .map(|i| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: \"{i}\"\n")
        })
        .collect();
    s.publish_objects("repo", REV1, &objects.join("---\n")).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;

    // the shared ConfigMap watch, read for impersonated passes too, has its first list
    controller.wait_live_watch_synced("v1/configmaps").await;
    reconcile_once(&s, &controller, "app", "first").await;
    let before = requests_by_resource(&controller).await;
    reconcile_once(&s, &controller, "app", "second").await;
    let after = requests_by_resource(&controller).await;

    let made: BTreeMap<&str, f64> = after
        .iter()
        .map(|(resource, n)| {
            (
                resource.as_str(),
                n - before.get(resource).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    assert!(
        !made.contains_key("configmaps"),
        "the applied objects are checked from the shared watch, without a request: {made:?}"
    );
    assert!(
        made.values().all(|n| *n <= 1.0) && !made.contains_key(""),
        "at most one request per kind and no discovery on the second no-op pass: {made:?}"
    );
    let ks = s.get("app").await.unwrap();
    assert_eq!(condition(&ks, "Ready").unwrap().status, "True");
    s.delete().await;
}
