//! `spec.kubeConfig.configMapRef`: the objects go to the remote cluster the ConfigMap names,
//! with a token of the ServiceAccount it names, and never to the management cluster.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::support::controller::Scenario;
use crate::support::remote::{apply, remote_cluster, trusted_user};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

#[tokio::test]
async fn config_map_ref_applies_to_the_remote_cluster_as_the_named_service_account() {
    let s = Scenario::new("kc-tenancy-remote").await;
    let remote = remote_cluster().await;
    let ns = s.namespace();
    // The remote cluster lets the first cluster's `deployer` manage ConfigMaps in `ns`.
    apply(
        &Api::<Namespace>::all(remote.client.clone()),
        ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    let (roles, bindings) = (
        Api::<Role>::namespaced(remote.client.clone(), ns),
        Api::<RoleBinding>::namespaced(remote.client.clone(), ns),
    );
    apply(
        &roles,
        "deployer",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deployer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}),
    )
    .await;
    apply(&bindings, "deployer", json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deployer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": trusted_user(ns, "deployer")}]})).await;

    apply(
        &Api::<ServiceAccount>::namespaced(s.client.clone(), ns),
        "deployer",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}}),
    )
    .await;
    let config_maps = Api::<ConfigMap>::namespaced(s.client.clone(), ns);
    for (name, provider) in [("remote", "generic"), ("cloud", "aws")] {
        apply(
            &config_maps,
            name,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"provider": provider, "address": remote.address, "ca.crt": remote.ca_pem,
                "serviceAccountName": "deployer"}}),
        )
        .await;
    }
    s.publish_objects(
        "repo",
        REV1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shipped\ndata:\n  value: \"1\"\n",
    )
    .await;
    let controller = s.start_controller(&[]);
    s.apply(
        "remote",
        json!({"kubeConfig": {"configMapRef": {"name": "remote"}}}),
    )
    .await;
    s.apply(
        "cloud",
        json!({"kubeConfig": {"configMapRef": {"name": "cloud"}}}),
    )
    .await;

    s.wait_applied(&controller, "remote", REV1).await;
    let shipped = Api::<ConfigMap>::namespaced(remote.client.clone(), ns)
        .get_opt("shipped")
        .await
        .unwrap();
    assert!(shipped.is_some(), "the object is on the remote cluster");
    let message = format!("KubeConfig configmap '{ns}/cloud' names provider 'aws', which is not supported");
    s.wait_ready(&controller, "cloud", "False", &message).await;
    assert_eq!(
        s.config_map_value("shipped").await,
        None,
        "neither Kustomization applied to the management cluster"
    );
    let _ = Api::<Namespace>::all(remote.client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
    s.delete().await;
}
