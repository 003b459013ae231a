//! `spec.kubeConfig.configMapRef`: the objects go to the remote cluster the ConfigMap names,
//! with a token of the ServiceAccount it names, and never to the management cluster.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::support::controller::Scenario;
use crate::support::remote::{RemoteCluster, apply, remote_cluster, trusted_user};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

/// Tokens for `configMapRef` are minted only with this gate (off by default, as in Flux).
const GATE_ON: &str = "--feature-gates=ObjectLevelWorkloadIdentity=true";

#[tokio::test]
async fn config_map_ref_applies_to_the_remote_cluster_as_the_named_service_account() {
    let s = Scenario::new("kc-tenancy-remote").await;
    let remote = remote_cluster().await;
    let ns = s.namespace();
    let_deployer_manage_config_maps(&remote, ns).await;
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
    let controller = s.start_controller(&[GATE_ON]);
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

/// The remote cluster lets the first cluster's `deployer` of `ns` manage ConfigMaps in `ns`.
async fn let_deployer_manage_config_maps(remote: &RemoteCluster, ns: &str) {
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
}

/// Finding 9 of issue 28: a tenant's `configMapRef` got its namespace's ServiceAccount tokens
/// for any audience (this cluster's own API audience worked) sent to any address, with no gate.
/// Off by default now; with the gate on, the operator's allow-lists bound address and audience.
#[tokio::test]
async fn config_map_ref_tokens_need_the_gate_and_the_allow_lists() {
    let s = Scenario::new("sec-gate-remote").await;
    let remote = remote_cluster().await;
    let ns = s.namespace();
    let_deployer_manage_config_maps(&remote, ns).await;
    apply(
        &Api::<ServiceAccount>::namespaced(s.client.clone(), ns),
        "deployer",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}}),
    )
    .await;
    let config_maps = Api::<ConfigMap>::namespaced(s.client.clone(), ns);
    let own_audience = "https://kubernetes.default.svc.cluster.local";
    for (name, address, audiences) in [
        ("listed", remote.address.as_str(), remote.address.as_str()),
        ("elsewhere", "https://127.0.0.1:1", "https://127.0.0.1:1"),
        ("own-audience", remote.address.as_str(), own_audience),
    ] {
        apply(
            &config_maps,
            name,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"provider": "generic", "address": address, "ca.crt": remote.ca_pem,
                "serviceAccountName": "deployer", "audiences": audiences}}),
        )
        .await;
    }
    s.publish_objects(
        "repo",
        REV1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shipped\ndata:\n  value: \"1\"\n",
    )
    .await;

    // Without the gate, as a Flux Deployment runs by default: no token for anyone.
    let mut controller = s.start_controller(&[]);
    s.apply(
        "listed",
        json!({"kubeConfig": {"configMapRef": {"name": "listed"}}}),
    )
    .await;
    let message = format!(
        "KubeConfig configmap '{ns}/listed' needs a ServiceAccount token: ObjectLevelWorkloadIdentity feature gate is not enabled"
    );
    s.wait_ready(&controller, "listed", "False", &message).await;
    controller.terminate();

    // With the gate and lists naming the remote cluster: only what they list gets a token.
    let addresses = format!("--workload-identity-allowed-addresses={}", remote.address);
    let audiences = format!("--workload-identity-allowed-audiences={}", remote.address);
    let controller = s.start_controller(&[GATE_ON, &addresses, &audiences]);
    for name in ["elsewhere", "own-audience"] {
        s.apply(name, json!({"kubeConfig": {"configMapRef": {"name": name}}}))
            .await;
    }
    let message = format!(
        "KubeConfig configmap '{ns}/elsewhere' names address 'https://127.0.0.1:1', which is not in --workload-identity-allowed-addresses"
    );
    s.wait_ready(&controller, "elsewhere", "False", &message).await;
    let message = format!(
        "KubeConfig configmap '{ns}/own-audience' names audience '{own_audience}', which is not in --workload-identity-allowed-audiences"
    );
    s.wait_ready(&controller, "own-audience", "False", &message).await;
    // The listed one gets its token and applies to the remote cluster.
    s.wait_applied(&controller, "listed", REV1).await;
    let shipped = Api::<ConfigMap>::namespaced(remote.client.clone(), ns)
        .get_opt("shipped")
        .await
        .unwrap();
    assert!(shipped.is_some(), "the object is on the remote cluster");
    assert_eq!(
        s.config_map_value("shipped").await,
        None,
        "never on the management cluster"
    );
    let _ = Api::<Namespace>::all(remote.client.clone())
        .delete(ns, &DeleteParams::background())
        .await;
    s.delete().await;
}
