//! The controller binary against the real control plane, with a test artifact
//! server standing in for source-controller. Each test runs its own controller process scoped
//! to its own namespace.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::{Value, json};

use crate::support::artifacts::{Reply, artifact_json, publish_artifact, source_crds};
use crate::support::config_maps;
use crate::support::controller::{
    ControllerProcess, OBJECTS_KUSTOMIZATION as KUSTOMIZATION, Scenario, condition,
};
use crate::support::eventually;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
const REV3: &str = "main@sha1:3333333333333333333333333333333333333333";
const REV4: &str = "main@sha1:4444444444444444444444444444444444444444";

fn inventory_ids(ks: &Kustomization) -> Vec<String> {
    let inventory = ks
        .status
        .as_ref()
        .and_then(|s| s.inventory.clone())
        .unwrap_or_default();
    inventory.entries.into_iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn create_update_prune_and_broken_revisions() {
    let s = Scenario::new("kc-life").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);

    // Create: Ready=True with Flux's message, the inventory, owner labels and events.
    s.publish_objects("repo", REV1, &config_maps(&[("a", "one"), ("b", "one")]))
        .await;
    s.apply("app", json!({})).await;
    let ks = s.wait_applied(&controller, "app", REV1).await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationSucceeded");
    assert_eq!(ready.message, format!("Applied revision: {REV1}"));
    assert!(
        condition(&ks, "Reconciling").is_none(),
        "Reconciling is removed on success"
    );
    let status = ks.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV1));
    assert_eq!(status.observed_generation, ks.metadata.generation.unwrap());
    assert_eq!(
        inventory_ids(&ks),
        [format!("{n}_a__ConfigMap"), format!("{n}_b__ConfigMap")]
    );
    assert_eq!(status.history.len(), 1);
    assert_eq!(
        status.history[0].last_reconciled_status,
        "ReconciliationSucceeded"
    );
    assert!(
        ks.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .contains(&"finalizers.fluxcd.io".to_string())
    );
    let cm = Api::<ConfigMap>::namespaced(s.client.clone(), n)
        .get("a")
        .await
        .unwrap();
    let labels = cm.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("kustomize.toolkit.fluxcd.io/name").map(String::as_str),
        Some("app")
    );
    assert_eq!(
        labels
            .get("kustomize.toolkit.fluxcd.io/namespace")
            .map(String::as_str),
        Some(n)
    );
    let events = eventually("creation events", Duration::from_secs(10), || async {
        let events = s.events("app").await;
        events
            .iter()
            .any(|(_, reason, _, _)| reason == "ReconciliationSucceeded")
            .then_some(events)
    })
    .await;
    let created = events
        .iter()
        .find(|(_, reason, _, _)| reason == "Progressing")
        .expect("a change-set event");
    assert_eq!(created.0, "Normal");
    assert_eq!(
        created.2,
        format!("ConfigMap/{n}/a created\nConfigMap/{n}/b created")
    );
    assert_eq!(created.3["kustomize.toolkit.fluxcd.io/revision"], REV1);

    // A new revision configures what changed and prunes what was removed.
    s.publish_objects("repo", REV2, &config_maps(&[("a", "two")]))
        .await;
    let ks = s.wait_applied(&controller, "app", REV2).await;
    assert_eq!(inventory_ids(&ks), [format!("{n}_a__ConfigMap")]);
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("two"));
    assert_eq!(s.config_map_value("b").await, None, "b was pruned");
    // The prune's event may be recorded after the status the wait saw.
    let pruned = format!("ConfigMap/{n}/b deleted");
    let events = eventually("the prune event", Duration::from_secs(10), || async {
        let events = s.events("app").await;
        (events.iter())
            .any(|(_, _, note, _)| *note == pruned)
            .then_some(events)
    })
    .await;
    let notes: Vec<&str> = events.iter().map(|(_, _, note, _)| note.as_str()).collect();
    // The apply and the prune, each in its own event, as Flux sends them.
    assert!(
        notes.contains(&format!("ConfigMap/{n}/a configured").as_str()),
        "{events:?}"
    );
    assert!(
        notes.contains(&format!("ConfigMap/{n}/b deleted").as_str()),
        "{events:?}"
    );

    // Bad YAML: BuildFailed, the running objects untouched, the inventory kept.
    s.publish_objects("repo", REV3, "a: [unclosed\n").await;
    let ks = s.wait_ready(&controller, "app", "False", "").await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "BuildFailed", "{ready:?}");
    assert!(
        ready.message.contains("objects.yaml"),
        "the message names the file: {}",
        ready.message
    );
    let status = ks.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV2));
    assert_eq!(status.last_attempted_revision.as_deref(), Some(REV3));
    assert_eq!(
        condition(&ks, "Reconciling").unwrap().reason,
        "ProgressingWithRetry"
    );
    assert_eq!(inventory_ids(&ks), [format!("{n}_a__ConfigMap")]);
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("two"));
    let events = s.events("app").await;
    assert!(
        events
            .iter()
            .any(|(t, reason, _, _)| t == "Warning" && reason == "BuildFailed"),
        "{events:?}"
    );

    // A dry-run failure: ReconciliationFailed; nothing applied, nothing pruned (a is stale here).
    let invalid = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: []}\n";
    let objects = format!("{}---\n{invalid}", config_maps(&[("c", "new")]));
    s.publish_objects("repo", REV4, &objects).await;
    let ks = s.wait_ready(&controller, "app", "False", "Deployment").await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationFailed", "{ready:?}");
    assert!(
        ready.message.contains(&format!("Deployment/{n}/web")),
        "{}",
        ready.message
    );
    assert_eq!(
        s.config_map_value("a").await.as_deref(),
        Some("two"),
        "a was not pruned"
    );
    assert_eq!(
        s.config_map_value("c").await,
        None,
        "nothing applied before validation passed"
    );
    assert_eq!(inventory_ids(&ks), [format!("{n}_a__ConfigMap")]);
    assert_eq!(ks.status.unwrap().last_applied_revision.as_deref(), Some(REV2));
    s.delete().await;
}

#[tokio::test]
async fn missing_source_retries_then_recovers() {
    let s = Scenario::new("kc-src").await;
    let controller = s.start_controller(&[]);
    source_crds(&s.client).await;
    s.apply("app", json!({"retryInterval": "2s"})).await;
    let ks = s.wait_ready(&controller, "app", "False", "").await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "ArtifactFailed");
    assert!(
        condition(&ks, "Ready").unwrap().message.contains("repo"),
        "names the source"
    );

    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    s.wait_applied(&controller, "app", REV1).await;
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("one"));
    s.delete().await;
}

/// Publishes REV1 with two directories, `infra` and `app`, each with a ConfigMap of its name.
async fn publish_infra_and_app(s: &Scenario) {
    let (infra, app) = (config_maps(&[("infra", "one")]), config_maps(&[("app", "one")]));
    let files = [
        ("infra/kustomization.yaml", KUSTOMIZATION),
        ("infra/objects.yaml", infra.as_str()),
        ("app/kustomization.yaml", KUSTOMIZATION),
        ("app/objects.yaml", app.as_str()),
    ];
    s.publish("repo", REV1, &files).await;
}

#[tokio::test]
async fn depends_on_waits_for_the_dependency() {
    let s = Scenario::new("kc-deps").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    publish_infra_and_app(&s).await;

    // The dependent first: it waits, saying why, and applies nothing.
    let depends_on_infra = json!({"dependsOn": [{"name": "infra"}], "path": "./app"});
    s.apply("app", depends_on_infra).await;
    let ks = s
        .wait_ready(&controller, "app", "False", &format!("dependency '{n}/infra'"))
        .await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "DependencyNotReady");
    assert_eq!(
        condition(&ks, "Ready").unwrap().message,
        format!(
            "dependency '{n}/infra' not found: kustomizations.kustomize.toolkit.fluxcd.io \"infra\" not found"
        )
    );
    assert_eq!(s.config_map_value("app").await, None);
    assert!(
        ks.status.unwrap().inventory.is_none(),
        "nothing applied while waiting"
    );

    s.apply("infra", json!({"path": "./infra"})).await;
    let infra = s
        .wait_ready(&controller, "infra", "True", "Applied revision")
        .await;
    let app = s.wait_ready(&controller, "app", "True", "Applied revision").await;
    let ready_at = |ks: &Kustomization| condition(ks, "Ready").unwrap().last_transition_time.0;
    assert!(ready_at(&app) >= ready_at(&infra), "app became ready after infra");
    let events = s.events("app").await;
    assert!(
        events.iter().any(|(t, reason, note, _)| t == "Normal"
            && reason == "DependencyNotReady"
            && note == "Dependencies do not meet ready condition, retrying in 2s"),
        "{events:?}"
    );
    s.delete().await;
}

#[tokio::test]
async fn suspend_resume_and_requested_at() {
    let s = Scenario::new("kc-susp").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    s.apply("app", json!({})).await;
    s.wait_ready(&controller, "app", "True", REV1).await;

    // Suspended: the status follows the new generation, a new revision is not applied.
    s.apply("app", json!({"suspend": true})).await;
    let api = Api::<Kustomization>::namespaced(s.client.clone(), n);
    eventually("suspension observed", Duration::from_secs(30), || async {
        let ks = api.get("app").await.ok()?;
        (ks.status?.observed_generation == ks.metadata.generation?).then_some(())
    })
    .await;
    s.publish_objects("repo", REV2, &config_maps(&[("a", "two")]))
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.config_map_value("a").await.as_deref(),
        Some("one"),
        "suspended: not applied"
    );
    assert_eq!(
        api.get("app")
            .await
            .unwrap()
            .status
            .unwrap()
            .last_applied_revision
            .as_deref(),
        Some(REV1)
    );

    // Resumed: the new revision is applied.
    s.apply("app", json!({"suspend": false})).await;
    s.wait_ready(&controller, "app", "True", REV2).await;
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("two"));

    // requestedAt triggers a run and is recorded.
    let patch =
        json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "2026-11-29T16:00:00Z"}}});
    api.patch("app", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    eventually("lastHandledReconcileAt", Duration::from_secs(30), || async {
        let status = api.get("app").await.ok()?.status?;
        (status.last_handled_reconcile_at.as_deref() == Some("2026-11-29T16:00:00Z")).then_some(())
    })
    .await;
    s.delete().await;
}

#[tokio::test]
async fn deletion_prunes_or_orphans_by_policy() {
    let s = Scenario::new("kc-del").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    s.publish_objects("pruned", REV1, &config_maps(&[("pruned", "x")]))
        .await;
    s.publish_objects("kept", REV1, &config_maps(&[("kept", "x")]))
        .await;
    let pruned = json!({"sourceRef": {"kind": "GitRepository", "name": "pruned"}});
    let orphaned =
        json!({"sourceRef": {"kind": "GitRepository", "name": "kept"}, "deletionPolicy": "Orphan"});
    s.apply("pruned", pruned).await;
    s.apply("kept", orphaned).await;
    s.wait_ready(&controller, "pruned", "True", REV1).await;
    s.wait_ready(&controller, "kept", "True", REV1).await;

    let api = Api::<Kustomization>::namespaced(s.client.clone(), n);
    for name in ["pruned", "kept"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in ["pruned", "kept"] {
        eventually(&format!("{name} gone"), Duration::from_secs(30), || async {
            s.get(name).await.is_none().then_some(())
        })
        .await;
    }
    eventually("pruned ConfigMap deleted", Duration::from_secs(30), || async {
        s.config_map_value("pruned").await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        s.config_map_value("kept").await.as_deref(),
        Some("x"),
        "Orphan leaves objects"
    );
    let events = s.events("kept").await;
    assert!(
        events
            .iter()
            .any(|(_, _, note, _)| note.contains("left in place")
                && note.contains(&format!("ConfigMap/{n}/kept"))),
        "an event says what was left behind: {events:?}"
    );
    let events = s.events("pruned").await;
    assert!(
        events
            .iter()
            .any(|(_, _, note, _)| note == &format!("ConfigMap/{n}/pruned deleted")),
        "{events:?}"
    );
    s.delete().await;
}

#[tokio::test]
async fn a_quiet_interval_writes_nothing_and_emits_only_the_success_event() {
    let s = Scenario::new("kc-quiet").await;
    let controller = s.start_controller(&["--interval-jitter-percentage=0"]);
    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    s.apply("app", json!({"interval": "1s"})).await;
    let ks = s.wait_ready(&controller, "app", "True", REV1).await;
    // Let the first pass's events land before counting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = s.get("app").await.unwrap();
    // Every event but the success event, which Flux sends on every run.
    let others = |events: Vec<(String, String, String, Value)>| {
        let others = events
            .into_iter()
            .filter(|(_, reason, _, _)| reason != "ReconciliationSucceeded");
        others.collect::<Vec<_>>()
    };
    let events_before = others(s.events("app").await);
    let start = successful_runs(&controller).await;
    // Several more successful reconciles, measured by the controller's own counter.
    eventually("three quiet reconciles", Duration::from_secs(30), || async {
        (successful_runs(&controller).await >= start + 3.0).then_some(())
    })
    .await;
    let after = s.get("app").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "no status write"
    );
    let events = s.events("app").await;
    let successes = events
        .iter()
        .filter(|(_, reason, _, _)| reason == "ReconciliationSucceeded");
    assert!(successes.count() >= 4, "one success event per run: {events:?}");
    assert_eq!(others(events), events_before, "no other event");
    assert_eq!(ks.status.unwrap().history, after.status.unwrap().history);

    // SIGTERM stops the controller cleanly.
    let mut controller = controller;
    assert!(
        controller.terminate().success(),
        "graceful shutdown:\n{}",
        controller.logs()
    );
    s.delete().await;
}

async fn successful_runs(controller: &ControllerProcess) -> f64 {
    controller
        .metric("kustomize_controller_reconciles_total{result=\"success\"}")
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn impersonation_denied_for_a_forbidden_kind_applies_nothing() {
    let s = Scenario::new("kc-imp").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    // The ServiceAccount may manage ConfigMaps only.
    let rbac = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": n}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "deployer", "namespace": n},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "deployer", "namespace": n},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": n}]}),
    ];
    for object in rbac {
        let kind = object["kind"].as_str().unwrap().to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let resource = match kind.as_str() {
            "ServiceAccount" => {
                kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&())
            }
            "Role" => kube::api::ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
            _ => kube::api::ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
        };
        Api::<kube::api::DynamicObject>::namespaced_with(s.client.clone(), n, &resource)
            .patch(&name, &PatchParams::apply("e2e-tests"), &Patch::Apply(object))
            .await
            .unwrap();
    }
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  key: value\n";
    let objects = format!("{}---\n{secret}", config_maps(&[("a", "one")]));
    s.publish_objects("repo", REV1, &objects).await;
    s.apply("app", json!({"serviceAccountName": "deployer"})).await;
    let ks = s.wait_ready(&controller, "app", "False", "").await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationFailed", "{ready:?}");
    assert!(
        ready.message.contains(&format!("Secret/{n}/token")),
        "names the object: {}",
        ready.message
    );
    assert!(ready.message.contains("forbidden"), "{}", ready.message);
    assert_eq!(s.config_map_value("a").await, None, "nothing else applied");
    s.delete().await;
}

#[tokio::test]
async fn two_replicas_elect_one_leader_and_fail_over() {
    let s = Scenario::new("kc-lead").await;
    let n = s.namespace();
    let election = [
        "--enable-leader-election",
        "--leader-election-lease-duration=4s",
        "--leader-election-renew-deadline=3s",
        "--leader-election-retry-period=1s",
    ];
    let mut first = ControllerProcess::start_as(n, "replica-1", &election);
    let leases = Api::<Lease>::namespaced(s.client.clone(), n);
    let holder = || async {
        leases
            .get_opt("kustomize-controller-leader-election")
            .await
            .ok()??
            .spec?
            .holder_identity
    };
    eventually("replica-1 leads", Duration::from_secs(30), || async {
        (holder().await.as_deref() == Some("replica-1")).then_some(())
    })
    .await;
    let second = ControllerProcess::start_as(n, "replica-2", &election);

    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    s.apply("app", json!({})).await;
    s.wait_ready(&first, "app", "True", REV1).await;
    eventually(
        "the leader logs its reconcile",
        Duration::from_secs(10),
        || async {
            first
                .logs()
                .contains(r#""Kustomization":{"name":"app""#)
                .then_some(())
        },
    )
    .await;
    assert!(
        !second.logs().contains(r#""Kustomization":{"name":"app""#),
        "the standby replica does not reconcile"
    );
    assert_eq!(holder().await.as_deref(), Some("replica-1"));

    // The leader dies without releasing the Lease: the standby takes over once it expires.
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(first.pid().to_string())
        .status();
    let _ = first.terminate();
    eventually("replica-2 leads", Duration::from_secs(30), || async {
        (holder().await.as_deref() == Some("replica-2")).then_some(())
    })
    .await;
    s.publish_objects("repo", REV2, &config_maps(&[("a", "two")]))
        .await;
    s.wait_ready(&second, "app", "True", REV2).await;
    s.delete().await;
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata:\n      labels: {app: web}\n      annotations: {fake-kubelet.e2e/behavior: BEHAVIOR}\n    spec:\n      containers: [{name: web, image: nginx}]\n";

#[tokio::test]
async fn wait_reports_health_and_unhealthy_rollouts_fail() {
    let s = Scenario::new("kc-health").await;
    let controller = s.start_controller(&[]);
    let healthy = DEPLOYMENT.replace("      annotations: {fake-kubelet.e2e/behavior: BEHAVIOR}\n", "");
    s.publish_objects("repo", REV1, &healthy).await;
    s.apply("app", json!({"wait": true})).await;
    let ks = s.wait_ready(&controller, "app", "True", REV1).await;
    let health = condition(&ks, "Healthy").expect("Healthy is set when wait is on");
    assert_eq!(
        (health.status.as_str(), health.reason.as_str()),
        ("True", "Succeeded")
    );
    assert!(
        health.message.starts_with("Health check passed in "),
        "{}",
        health.message
    );

    // A rollout whose pods never become ready: HealthCheckFailed, Healthy=False.
    let stuck = DEPLOYMENT.replace("BEHAVIOR", "never-ready");
    s.publish_objects("repo", REV2, &stuck).await;
    let ks = s.wait_ready(&controller, "app", "False", "Deployment").await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "HealthCheckFailed");
    assert_eq!(condition(&ks, "Healthy").unwrap().status, "False");
    let status = ks.status.unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some(REV1),
        "not applied until healthy"
    );
    assert_eq!(status.history[0].last_reconciled_status, "HealthCheckFailed");
    s.delete().await;
}

#[tokio::test]
async fn a_health_check_without_api_version_waits_for_that_deployment() {
    let s = Scenario::new("kc-hc").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    let spec = json!({"timeout": "10s", "healthChecks": [{"kind": "Deployment", "name": "web"}]});
    let healthy = DEPLOYMENT.replace("      annotations: {fake-kubelet.e2e/behavior: BEHAVIOR}\n", "");
    s.publish_objects("repo", REV1, &healthy).await;
    s.apply("app", spec).await;
    let ks = s.wait_applied(&controller, "app", REV1).await;
    let health = condition(&ks, "Healthy").expect("Healthy is set when health checks ran");
    assert_eq!(health.status, "True", "{health:?}");

    // It really waits for that Deployment: pods that never become ready fail the check.
    let stuck = DEPLOYMENT.replace("BEHAVIOR", "never-ready");
    s.publish_objects("repo", REV2, &stuck).await;
    let ks = s
        .wait_ready(&controller, "app", "False", &format!("Deployment/{n}/web"))
        .await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "HealthCheckFailed");
    s.delete().await;
}

#[tokio::test]
async fn a_configuration_error_stalls_and_is_not_retried() {
    let s = Scenario::new("kc-stall").await;
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    let bad = json!({"healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Widget", "current": "status.("}]});
    s.apply("app", bad).await;
    let ks = s
        .wait_ready(&controller, "app", "False", "configuration error")
        .await;
    let stalled = condition(&ks, "Stalled").expect("Stalled is set for a terminal error");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "InvalidCELExpression")
    );
    assert_eq!(
        ks.status.as_ref().map(|s| s.observed_generation),
        ks.metadata.generation,
        "a terminal error is the final word on this generation"
    );
    assert_eq!(s.config_map_value("a").await, None, "nothing applied");
    let failures = || async {
        controller
            .metric("kustomize_controller_reconciles_total{result=\"failure\"}")
            .await
            .unwrap_or(0.0)
    };
    eventually(
        "the failed reconcile is counted",
        Duration::from_secs(10),
        || async { (failures().await >= 1.0).then_some(()) },
    )
    .await;
    // No backoff retries: only a change runs it again (the backoff would have retried within
    // 750 ms, 1.5 s, 3 s). A late watch event of the source may run it once more, which is a
    // change, not a retry, so the queue's retry count is what must stay at zero.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let retries = controller
        .metric("workqueue_retries_total{name=\"kustomization\"")
        .await;
    assert_eq!(
        retries,
        Some(0.0),
        "a terminal error is not retried; the controller's log:\n{}",
        controller.logs()
    );
    assert!(failures().await <= 2.0, "no backoff retries");
    s.delete().await;
}

#[tokio::test]
async fn costly_cel_expressions_fail_naming_their_field_and_the_controller_keeps_serving() {
    // An 838-byte expression doubling a string 58 times. Before: building it aborted the
    // controller on memory, and it crash-looped on the same Kustomization.
    let doubling = format!("['ab']{}.all(s, size(s) > 0)", ".map(s, s + s)".repeat(58));
    let s = Scenario::new("kc-cel").await;
    let n = s.namespace();
    let controller = s.start_controller(&["--concurrent=1"]);
    publish_infra_and_app(&s).await;

    // As a health rule: the object it judges fails, and so does the health check.
    let judged = json!({"path": "./infra", "wait": true, "healthCheckExprs": [
        {"apiVersion": "v1", "kind": "ConfigMap", "current": doubling}]});
    s.apply("infra", judged).await;
    let limit = "evaluation exceeded its cost limit (16 MiB of values built or copied)";
    let ks = s
        .wait_ready(
            &controller,
            "infra",
            "False",
            &format!("ConfigMap/{n}/infra: Failed: healthCheckExprs[0].current: {limit}"),
        )
        .await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "HealthCheckFailed");

    // As a readyExpr: a configuration error, not retried.
    let ready_expr = json!({"path": "./app", "dependsOn": [{"name": "infra", "readyExpr": doubling}]});
    s.apply("app", ready_expr).await;
    let ks = s
        .wait_ready(
            &controller,
            "app",
            "False",
            &format!("dependsOn[0].readyExpr: {limit}"),
        )
        .await;
    let stalled = condition(&ks, "Stalled").expect("Stalled is set for a terminal error");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "InvalidCELExpression")
    );

    // The same process still serves everyone else.
    s.apply("plain", json!({"path": "./app"})).await;
    s.wait_applied(&controller, "plain", REV1).await;
    s.delete().await;
}

#[tokio::test]
async fn a_failing_download_retries_without_holding_the_only_worker() {
    // Flux retries a download inside the reconcile (9 retries, 5s..30s apart: over three
    // minutes); with one worker, every other Kustomization would wait that long.
    let s = Scenario::new("kc-retry").await;
    let n = s.namespace();
    // The default --artifact-fetch-retries (9) applies.
    let controller = s.start_controller(&["--concurrent=1"]);
    let down_url = s.server.route(&format!("/{n}/down.tar.gz"), Reply::Status(503));
    source_crds(&s.client).await;
    publish_artifact(
        &s.client,
        SourceKind::GitRepository,
        n,
        "down",
        artifact_json(&down_url, REV1, b"never served"),
    )
    .await;
    let broken = json!({"sourceRef": {"kind": "GitRepository", "name": "down"}, "retryInterval": "10m"});
    s.apply("broken", broken).await;
    eventually("the first download attempt", Duration::from_secs(30), || async {
        (s.server.hits(&format!("/{n}/down.tar.gz")) >= 1).then_some(())
    })
    .await;

    s.publish_objects("repo", REV1, &config_maps(&[("a", "one")]))
        .await;
    s.apply("good", json!({})).await;
    s.wait_applied(&controller, "good", REV1).await;
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("one"));

    // The broken one keeps being retried (5s, then 10s later), and says why it is not ready.
    let ks = s.wait_ready(&controller, "broken", "False", &down_url).await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "ArtifactFailed");
    assert!(
        condition(&ks, "Ready").unwrap().message.contains("503"),
        "{:?}",
        condition(&ks, "Ready")
    );
    eventually(
        "a retry well before retryInterval",
        Duration::from_secs(40),
        || async { (s.server.hits(&format!("/{n}/down.tar.gz")) >= 3).then_some(()) },
    )
    .await;
    s.delete().await;
}

#[tokio::test]
async fn a_labelled_config_map_change_reconciles_the_kustomizations_reading_it() {
    let s = Scenario::new("kc-cfg").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    let vars: Api<ConfigMap> = Api::namespaced(s.client.clone(), n);
    let settings = |greeting: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "vars", "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
            "data": {"greeting": greeting}})
    };
    let params = PatchParams::apply("test").force();
    vars.patch("vars", &params, &Patch::Apply(settings("hello")))
        .await
        .unwrap();
    s.publish_objects("repo", REV1, &config_maps(&[("a", "${greeting}")]))
        .await;
    // A 10m interval: only the watch can bring the new value within the wait below.
    let substitute = json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}});
    s.apply("app", substitute).await;
    s.wait_applied(&controller, "app", REV1).await;
    assert_eq!(s.config_map_value("a").await.as_deref(), Some("hello"));

    vars.patch("vars", &params, &Patch::Apply(settings("hi")))
        .await
        .unwrap();
    eventually("the new value applied", Duration::from_secs(30), || async {
        (s.config_map_value("a").await.as_deref() == Some("hi")).then_some(())
    })
    .await;
    s.delete().await;
}
