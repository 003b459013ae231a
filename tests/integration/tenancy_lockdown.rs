//! Flux's lockdown flags (`--no-cross-namespace-refs=true --default-service-account=default`)
//! hold whatever a tenant writes in its Kustomization: an empty `serviceAccountName` is no
//! name, so the default ServiceAccount applies, never the controller itself.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::support::controller::{Scenario, condition};
use crate::support::remote::apply;
use crate::support::{eventually, inline_admin_kubeconfig};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

/// Issue 28, finding 1. On 15bcfc7, with the lockdown flags, this artifact (a ClusterRoleBinding
/// of the tenant's `default` ServiceAccount to `cluster-admin`) was refused without
/// `serviceAccountName` and applied with `serviceAccountName: ""`, on this cluster and through
/// a kubeconfig: "" skipped the default and then meant "no impersonation", so the controller
/// applied with its own identity and the tenant became cluster-admin.
#[tokio::test]
async fn an_empty_service_account_name_cannot_escape_the_default_service_account() {
    let s = Scenario::new("kc-lockdown").await;
    let ns = s.namespace().to_string();
    apply(
        &Api::<Secret>::namespaced(s.client.clone(), &ns),
        "cluster",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster"},
            "stringData": {"value": inline_admin_kubeconfig()}}),
    )
    .await;
    let escalate = format!("escalate-{ns}");
    s.publish_objects(
        "repo",
        REV1,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {escalate}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]\n"
        ),
    )
    .await;
    let _controller = s.start_controller(&[
        "--no-cross-namespace-refs=true",
        "--default-service-account=default",
    ]);
    let remote = json!({"secretRef": {"name": "cluster"}});
    // (Kustomization, its spec fields); each binding gets its name's prefix
    let cases = [
        ("absent", json!({})),
        ("empty", json!({"serviceAccountName": ""})),
        (
            "remote-empty",
            json!({"serviceAccountName": "", "kubeConfig": remote}),
        ),
    ];
    for (name, fields) in &cases {
        let mut overrides = json!({"namePrefix": format!("{name}-")});
        overrides
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        s.apply(name, overrides).await;
    }

    let mut reconciled = vec![];
    for (name, _) in &cases {
        let ks = eventually(&format!("{name} reconciled"), Duration::from_secs(60), || async {
            let ks = s.get(name).await?;
            let ready = condition(&ks, "Ready")?;
            (ready.status != "Unknown").then_some(ks)
        })
        .await;
        reconciled.push((*name, ks));
    }
    // Looked up, and removed, before any assertion: a failed run must not leave a
    // cluster-admin binding behind for the rest of the suite.
    let bindings = Api::<ClusterRoleBinding>::all(s.client.clone());
    let mut created = vec![];
    for (name, _) in &cases {
        let binding = format!("{name}-{escalate}");
        if bindings.get_opt(&binding).await.unwrap().is_some() {
            let _ = bindings.delete(&binding, &DeleteParams::default()).await;
            created.push(binding);
        }
    }

    let default_user = format!("system:serviceaccount:{ns}:default");
    for (name, ks) in &reconciled {
        if *name != "absent" {
            assert_eq!(
                ks.spec.service_account_name.as_deref(),
                Some(""),
                "{name}: the API server keeps the empty name"
            );
        }
        let ready = condition(ks, "Ready").unwrap();
        assert_eq!(
            ready.status, "False",
            "{name} was applied, with the controller's identity: {}",
            ready.message
        );
        assert!(
            ready.message.contains(&default_user) && ready.message.contains("forbidden"),
            "{name}: refused as the default ServiceAccount: {}",
            ready.message
        );
    }
    assert!(created.is_empty(), "created: {created:?}");
    s.delete().await;
}
