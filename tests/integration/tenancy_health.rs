//! Health checks and CEL expressions read objects with the identity that applies them: a
//! tenant cannot learn another namespace's Secret through `healthChecks`/`healthCheckExprs`.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::json;

use crate::identity::config_map_deployer;
use crate::support::TestNamespace;
use crate::support::controller::{Scenario, condition};
use crate::support::remote::apply;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

#[tokio::test]
async fn a_tenant_cannot_probe_another_namespaces_secret_through_health_checks() {
    let s = Scenario::new("kc-tenancy-health").await;
    let vault = TestNamespace::new(&s.client, "kc-vault").await;
    apply(
        &Api::<Secret>::namespaced(s.client.clone(), &vault.name),
        "db",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "stringData": {"password": "hunter2"}}),
    )
    .await;
    config_map_deployer(&s, "deployer").await;
    s.publish_objects(
        "repo",
        REV1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  value: \"1\"\n",
    )
    .await;
    let controller = s.start_controller(&[]);
    // One right guess of the password (base64 of "hunter2"), one wrong one: whatever the
    // controller could read, the tenant must not tell them apart.
    for (name, guess) in [("right", "aHVudGVyMg=="), ("wrong", "d3Jvbmc=")] {
        s.apply(
            name,
            json!({
                // each its own ConfigMap: two owners of one object would be a conflict instead
                "serviceAccountName": "deployer", "timeout": "5s", "namePrefix": format!("{name}-"),
                "healthChecks": [{"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": vault.name}],
                "healthCheckExprs": [{"apiVersion": "v1", "kind": "Secret",
                    "current": format!("data.password == '{guess}'")}],
            }),
        )
        .await;
    }
    for name in ["right", "wrong"] {
        let ks = s.wait_ready(&controller, name, "False", "").await;
        let ready = condition(&ks, "Ready").unwrap();
        assert_eq!(ready.reason, "HealthCheckFailed", "{name}: {}", ready.message);
        assert!(!ready.message.contains("hunter2"), "{name}: {}", ready.message);
    }
    assert_eq!(
        s.config_map_value("right-app").await.as_deref(),
        Some("1"),
        "the tenant's own objects are applied"
    );
    vault.delete().await;
    s.delete().await;
}
