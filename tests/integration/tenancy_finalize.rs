//! Deleting a Kustomization whose client cannot be built for a passing reason (here the
//! controller may not read the kubeconfig Secret for a while) keeps the finalizer and deletes
//! the objects once the fault passes, instead of orphaning them.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kustomize_controller::api::Kustomization;
use serde_json::{Value, json};

use crate::support::controller::{ControllerProcess, Scenario};
use crate::support::remote::apply;
use crate::support::{admin_files, eventually, inline_admin_kubeconfig};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

/// The shipped ClusterRole's rules, except that Secrets may be listed and watched but not read.
fn rules_without_secret_reads() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rbac/role.yaml");
    let role: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut rules = vec![];
    for rule in role["rules"].as_array().unwrap() {
        let resources = rule["resources"].as_array().unwrap();
        if resources.iter().any(|r| r == "secrets") {
            let others: Vec<&Value> = resources.iter().filter(|r| *r != "secrets").collect();
            rules.push(json!({"apiGroups": [""], "resources": others, "verbs": rule["verbs"]}));
            rules.push(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}));
        } else {
            rules.push(rule.clone());
        }
    }
    Value::Array(rules)
}

#[tokio::test]
async fn a_passing_client_error_at_deletion_keeps_the_objects_managed() {
    let s = Scenario::new("kc-tenancy-fin").await;
    let ns = s.namespace().to_string();
    let (server, ca, cert, key) = admin_files();
    // The Kustomization reaches the cluster through a kubeconfig with inline credentials.
    let remote = inline_admin_kubeconfig();
    apply(
        &Api::<Secret>::namespaced(s.client.clone(), &ns),
        "cluster",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster"}, "stringData": {"value": remote}}),
    )
    .await;
    // The controller runs as a user with the shipped rights, except reading Secrets, which a
    // RoleBinding in the namespace grants and the test takes away for a while.
    let user = format!("kc-limited-{ns}");
    apply(
        &Api::<ClusterRole>::all(s.client.clone()),
        &user,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
            "rules": rules_without_secret_reads()}),
    )
    .await;
    apply(&Api::<ClusterRoleBinding>::all(s.client.clone()), &user, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})).await;
    apply(
        &Api::<ClusterRole>::all(s.client.clone()),
        &format!("{user}-secrets"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("{user}-secrets")},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    )
    .await;
    let bindings = Api::<RoleBinding>::namespaced(s.client.clone(), &ns);
    let reader = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "secret-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{user}-secrets")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    apply(&bindings, "secret-reader", reader.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("controller.kubeconfig");
    std::fs::write(
        &own,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\", certificate-authority: {ca}}}}}]\n\
             users: [{{name: u, user: {{client-certificate: {cert}, client-key: {key}, as: {user}}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();

    s.publish_objects(
        "repo",
        REV1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: managed\ndata:\n  value: \"1\"\n",
    )
    .await;
    let controller = ControllerProcess::start_with_kubeconfig(&ns, &own, &["--max-retry-delay=2s"]);
    s.apply("app", json!({"kubeConfig": {"secretRef": {"name": "cluster"}}}))
        .await;
    s.wait_applied(&controller, "app", REV1).await;

    bindings
        .delete("secret-reader", &DeleteParams::default())
        .await
        .unwrap();
    let kustomizations = Api::<Kustomization>::namespaced(s.client.clone(), &ns);
    kustomizations
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        kustomizations.get_opt("app").await.unwrap().is_some(),
        "the finalizer stays while the kubeconfig cannot be read\n{}",
        controller.logs()
    );
    assert_eq!(s.config_map_value("managed").await.as_deref(), Some("1"));

    bindings
        .create(&PostParams::default(), &serde_json::from_value(reader).unwrap())
        .await
        .unwrap();
    eventually(
        "the Kustomization is finalized",
        Duration::from_secs(60),
        || async {
            kustomizations
                .get_opt("app")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let managed = Api::<ConfigMap>::namespaced(s.client.clone(), &ns)
        .get_opt("managed")
        .await
        .unwrap();
    assert!(
        managed.is_none(),
        "deletion pruned the object once the kubeconfig could be read"
    );
    for name in [user.clone(), format!("{user}-secrets")] {
        let _ = Api::<ClusterRole>::all(s.client.clone())
            .delete(&name, &DeleteParams::default())
            .await;
    }
    let _ = Api::<ClusterRoleBinding>::all(s.client.clone())
        .delete(&user, &DeleteParams::default())
        .await;
    s.delete().await;
}
