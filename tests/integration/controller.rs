//! Issue 7: the controller binary against the real control plane, with a test artifact
//! server standing in for source-controller. Each test runs its own controller process scoped
//! to its own namespace.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::json;

use crate::support::artifacts::{ArtifactServer, Reply, artifact_json, publish_artifact};
use crate::support::controller::{
    ControllerProcess, apply_kustomization, condition, events_about, get_kustomization, publish, wait_ready,
};
use crate::support::{TestNamespace, client, eventually, kustomization_crd};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
const REV3: &str = "main@sha1:3333333333333333333333333333333333333333";
const REV4: &str = "main@sha1:4444444444444444444444444444444444444444";

const KUSTOMIZATION: &str =
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [objects.yaml]\n";

fn config_maps(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(name, value)| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn spec(namespace: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "interval": "10m", "prune": true, "timeout": "30s", "targetNamespace": namespace,
        "sourceRef": {"kind": "GitRepository", "name": "repo"},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

async fn setup(prefix: &str) -> (Client, TestNamespace, ArtifactServer) {
    let client = client().await;
    kustomization_crd(&client).await;
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns, ArtifactServer::start().await)
}

async fn config_map_value(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()?;
    cm.data?.get("value").cloned()
}

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
    let (client, ns, server) = setup("kc-life").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);

    // Create: Ready=True with Flux's message, the inventory, owner labels and events.
    let objects = config_maps(&[("a", "one"), ("b", "one")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    apply_kustomization(&client, n, "app", spec(n, json!({}))).await;
    let ks = wait_ready(
        &client,
        &controller,
        n,
        "app",
        "True",
        &format!("Applied revision: {REV1}"),
    )
    .await;
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
    let cm = Api::<ConfigMap>::namespaced(client.clone(), n)
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
        let events = events_about(&client, n, "app").await;
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
    let objects = config_maps(&[("a", "two")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV2,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    let ks = wait_ready(
        &client,
        &controller,
        n,
        "app",
        "True",
        &format!("Applied revision: {REV2}"),
    )
    .await;
    assert_eq!(inventory_ids(&ks), [format!("{n}_a__ConfigMap")]);
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("two"));
    assert_eq!(config_map_value(&client, n, "b").await, None, "b was pruned");
    let events = events_about(&client, n, "app").await;
    assert!(
        events.iter().any(
            |(_, _, note, _)| note.contains(&format!("ConfigMap/{n}/a configured"))
                && note.contains(&format!("ConfigMap/{n}/b deleted"))
        ),
        "{events:?}"
    );

    // Bad YAML: BuildFailed, the running objects untouched, the inventory kept.
    publish(
        &client,
        &server,
        n,
        "repo",
        REV3,
        &[
            ("kustomization.yaml", KUSTOMIZATION),
            ("objects.yaml", "a: [unclosed\n"),
        ],
    )
    .await;
    let ks = wait_ready(&client, &controller, n, "app", "False", "").await;
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
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("two"));
    let events = events_about(&client, n, "app").await;
    assert!(
        events
            .iter()
            .any(|(t, reason, _, _)| t == "Warning" && reason == "BuildFailed"),
        "{events:?}"
    );

    // A dry-run failure: ReconciliationFailed; nothing applied, nothing pruned (a is stale here).
    let invalid = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: []}\n";
    let objects = format!("{}---\n{invalid}", config_maps(&[("c", "new")]));
    publish(
        &client,
        &server,
        n,
        "repo",
        REV4,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    let ks = wait_ready(&client, &controller, n, "app", "False", "Deployment").await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationFailed", "{ready:?}");
    assert!(
        ready.message.contains(&format!("Deployment/{n}/web")),
        "{}",
        ready.message
    );
    assert_eq!(
        config_map_value(&client, n, "a").await.as_deref(),
        Some("two"),
        "a was not pruned"
    );
    assert_eq!(
        config_map_value(&client, n, "c").await,
        None,
        "nothing applied before validation passed"
    );
    assert_eq!(inventory_ids(&ks), [format!("{n}_a__ConfigMap")]);
    assert_eq!(ks.status.unwrap().last_applied_revision.as_deref(), Some(REV2));
    ns.delete().await;
}

#[tokio::test]
async fn missing_source_retries_then_recovers() {
    let (client, ns, server) = setup("kc-src").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    crate::support::artifacts::source_crds(&client).await;
    apply_kustomization(&client, n, "app", spec(n, json!({"retryInterval": "2s"}))).await;
    let ks = wait_ready(&client, &controller, n, "app", "False", "").await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "ArtifactFailed");
    assert!(
        condition(&ks, "Ready").unwrap().message.contains("repo"),
        "names the source"
    );

    let objects = config_maps(&[("a", "one")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    wait_ready(
        &client,
        &controller,
        n,
        "app",
        "True",
        &format!("Applied revision: {REV1}"),
    )
    .await;
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("one"));
    ns.delete().await;
}

#[tokio::test]
async fn depends_on_waits_for_the_dependency() {
    let (client, ns, server) = setup("kc-deps").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    let (infra, app) = (config_maps(&[("infra", "one")]), config_maps(&[("app", "one")]));
    let files = [
        ("infra/kustomization.yaml", KUSTOMIZATION),
        ("infra/objects.yaml", infra.as_str()),
        ("app/kustomization.yaml", KUSTOMIZATION),
        ("app/objects.yaml", app.as_str()),
    ];
    publish(&client, &server, n, "repo", REV1, &files).await;

    // The dependent first: it waits, saying why, and applies nothing.
    apply_kustomization(
        &client,
        n,
        "app",
        spec(n, json!({"dependsOn": [{"name": "infra"}], "path": "./app"})),
    )
    .await;
    let ks = wait_ready(
        &client,
        &controller,
        n,
        "app",
        "False",
        &format!("dependency '{n}/infra'"),
    )
    .await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "DependencyNotReady");
    assert_eq!(
        condition(&ks, "Ready").unwrap().message,
        format!(
            "dependency '{n}/infra' not found: kustomizations.kustomize.toolkit.fluxcd.io \"infra\" not found"
        )
    );
    assert_eq!(config_map_value(&client, n, "app").await, None);
    assert!(
        ks.status.unwrap().inventory.is_none(),
        "nothing applied while waiting"
    );

    apply_kustomization(&client, n, "infra", spec(n, json!({"path": "./infra"}))).await;
    let infra = wait_ready(&client, &controller, n, "infra", "True", "Applied revision").await;
    let app = wait_ready(&client, &controller, n, "app", "True", "Applied revision").await;
    let ready_at = |ks: &Kustomization| condition(ks, "Ready").unwrap().last_transition_time.0;
    assert!(ready_at(&app) >= ready_at(&infra), "app became ready after infra");
    let events = events_about(&client, n, "app").await;
    assert!(
        events.iter().any(|(t, reason, note, _)| t == "Normal"
            && reason == "DependencyNotReady"
            && note == "Dependencies do not meet ready condition, retrying in 2s"),
        "{events:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn suspend_resume_and_requested_at() {
    let (client, ns, server) = setup("kc-susp").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    let files = |value: &'static str| {
        vec![
            ("kustomization.yaml", KUSTOMIZATION.to_string()),
            ("objects.yaml", config_maps(&[("a", value)])),
        ]
    };
    let publish_rev = |rev: &'static str, value: &'static str| {
        let (client, server) = (client.clone(), server.clone());
        async move {
            let files = files(value);
            let refs: Vec<(&'static str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
            publish(&client, &server, n, "repo", rev, &refs).await;
        }
    };
    publish_rev(REV1, "one").await;
    apply_kustomization(&client, n, "app", spec(n, json!({}))).await;
    wait_ready(&client, &controller, n, "app", "True", REV1).await;

    // Suspended: the status follows the new generation, a new revision is not applied.
    apply_kustomization(&client, n, "app", spec(n, json!({"suspend": true}))).await;
    let api = Api::<Kustomization>::namespaced(client.clone(), n);
    eventually("suspension observed", Duration::from_secs(30), || async {
        let ks = api.get("app").await.ok()?;
        (ks.status?.observed_generation == ks.metadata.generation?).then_some(())
    })
    .await;
    publish_rev(REV2, "two").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        config_map_value(&client, n, "a").await.as_deref(),
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
    apply_kustomization(&client, n, "app", spec(n, json!({"suspend": false}))).await;
    wait_ready(&client, &controller, n, "app", "True", REV2).await;
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("two"));

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
    ns.delete().await;
}

#[tokio::test]
async fn deletion_prunes_or_orphans_by_policy() {
    let (client, ns, server) = setup("kc-del").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    let pruned = config_maps(&[("pruned", "x")]);
    let kept = config_maps(&[("kept", "x")]);
    publish(
        &client,
        &server,
        n,
        "pruned",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &pruned)],
    )
    .await;
    publish(
        &client,
        &server,
        n,
        "kept",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &kept)],
    )
    .await;
    apply_kustomization(
        &client,
        n,
        "pruned",
        spec(
            n,
            json!({"sourceRef": {"kind": "GitRepository", "name": "pruned"}}),
        ),
    )
    .await;
    apply_kustomization(
        &client,
        n,
        "kept",
        spec(
            n,
            json!({"sourceRef": {"kind": "GitRepository", "name": "kept"}, "deletionPolicy": "Orphan"}),
        ),
    )
    .await;
    wait_ready(&client, &controller, n, "pruned", "True", REV1).await;
    wait_ready(&client, &controller, n, "kept", "True", REV1).await;

    let api = Api::<Kustomization>::namespaced(client.clone(), n);
    for name in ["pruned", "kept"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in ["pruned", "kept"] {
        eventually(&format!("{name} gone"), Duration::from_secs(30), || async {
            get_kustomization(&client, n, name).await.is_none().then_some(())
        })
        .await;
    }
    eventually("pruned ConfigMap deleted", Duration::from_secs(30), || async {
        config_map_value(&client, n, "pruned")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        config_map_value(&client, n, "kept").await.as_deref(),
        Some("x"),
        "Orphan leaves objects"
    );
    let events = events_about(&client, n, "kept").await;
    assert!(
        events
            .iter()
            .any(|(_, _, note, _)| note.contains("left in place")
                && note.contains(&format!("ConfigMap/{n}/kept"))),
        "an event says what was left behind: {events:?}"
    );
    let events = events_about(&client, n, "pruned").await;
    assert!(
        events
            .iter()
            .any(|(_, _, note, _)| note == &format!("ConfigMap/{n}/pruned deleted")),
        "{events:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_quiet_interval_writes_nothing_and_emits_nothing() {
    let (client, ns, server) = setup("kc-quiet").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &["--interval-jitter-percentage=0"]);
    let objects = config_maps(&[("a", "one")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    apply_kustomization(&client, n, "app", spec(n, json!({"interval": "1s"}))).await;
    let ks = wait_ready(&client, &controller, n, "app", "True", REV1).await;
    // Let the first pass's events land before counting.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = get_kustomization(&client, n, "app").await.unwrap();
    let events_before = events_about(&client, n, "app").await.len();
    let start = successful_runs(&controller).await;
    // Several more successful reconciles, measured by the controller's own counter.
    eventually("three quiet reconciles", Duration::from_secs(30), || async {
        (successful_runs(&controller).await >= start + 3.0).then_some(())
    })
    .await;
    let after = get_kustomization(&client, n, "app").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "no status write"
    );
    assert_eq!(
        events_about(&client, n, "app").await.len(),
        events_before,
        "no event"
    );
    assert_eq!(ks.status.unwrap().history, after.status.unwrap().history);

    // SIGTERM stops the controller cleanly.
    let mut controller = controller;
    assert!(
        controller.terminate().success(),
        "graceful shutdown:\n{}",
        controller.logs()
    );
    ns.delete().await;
}

async fn successful_runs(controller: &ControllerProcess) -> f64 {
    controller
        .metric("kustomize_controller_reconciles_total{result=\"success\"}")
        .await
        .unwrap_or(0.0)
}

#[tokio::test]
async fn impersonation_denied_for_a_forbidden_kind_applies_nothing() {
    let (client, ns, server) = setup("kc-imp").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
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
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), n, &resource)
            .patch(&name, &PatchParams::apply("e2e-tests"), &Patch::Apply(object))
            .await
            .unwrap();
    }
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\nstringData:\n  key: value\n";
    let objects = format!("{}---\n{secret}", config_maps(&[("a", "one")]));
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    apply_kustomization(
        &client,
        n,
        "app",
        spec(n, json!({"serviceAccountName": "deployer"})),
    )
    .await;
    let ks = wait_ready(&client, &controller, n, "app", "False", "").await;
    let ready = condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationFailed", "{ready:?}");
    assert!(
        ready.message.contains(&format!("Secret/{n}/token")),
        "names the object: {}",
        ready.message
    );
    assert!(ready.message.contains("forbidden"), "{}", ready.message);
    assert_eq!(
        config_map_value(&client, n, "a").await,
        None,
        "nothing else applied"
    );
    ns.delete().await;
}

#[tokio::test]
async fn two_replicas_elect_one_leader_and_fail_over() {
    let (client, ns, server) = setup("kc-lead").await;
    let n = ns.name.as_str();
    let election = [
        "--enable-leader-election",
        "--leader-election-lease-duration=4s",
        "--leader-election-renew-deadline=3s",
        "--leader-election-retry-period=1s",
    ];
    let mut first = ControllerProcess::start_as(n, "replica-1", &election);
    let leases = Api::<Lease>::namespaced(client.clone(), n);
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

    let objects = config_maps(&[("a", "one")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    apply_kustomization(&client, n, "app", spec(n, json!({}))).await;
    wait_ready(&client, &first, n, "app", "True", REV1).await;
    eventually(
        "the leader logs its reconcile",
        Duration::from_secs(10),
        || async { first.logs().contains("\"kustomization\":\"app\"").then_some(()) },
    )
    .await;
    assert!(
        !second.logs().contains("\"kustomization\":\"app\""),
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
    let objects = config_maps(&[("a", "two")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV2,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    wait_ready(&client, &second, n, "app", "True", REV2).await;
    ns.delete().await;
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata:\n      labels: {app: web}\n      annotations: {fake-kubelet.e2e/behavior: BEHAVIOR}\n    spec:\n      containers: [{name: web, image: nginx}]\n";

#[tokio::test]
async fn wait_reports_health_and_unhealthy_rollouts_fail() {
    let (client, ns, server) = setup("kc-health").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    let healthy = DEPLOYMENT.replace("      annotations: {fake-kubelet.e2e/behavior: BEHAVIOR}\n", "");
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &healthy)],
    )
    .await;
    apply_kustomization(&client, n, "app", spec(n, json!({"wait": true}))).await;
    let ks = wait_ready(&client, &controller, n, "app", "True", REV1).await;
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
    publish(
        &client,
        &server,
        n,
        "repo",
        REV2,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &stuck)],
    )
    .await;
    let ks = wait_ready(&client, &controller, n, "app", "False", "Deployment").await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "HealthCheckFailed");
    assert_eq!(condition(&ks, "Healthy").unwrap().status, "False");
    let status = ks.status.unwrap();
    assert_eq!(
        status.last_applied_revision.as_deref(),
        Some(REV1),
        "not applied until healthy"
    );
    assert_eq!(status.history[0].last_reconciled_status, "HealthCheckFailed");
    ns.delete().await;
}

#[tokio::test]
async fn a_failing_download_retries_without_holding_the_only_worker() {
    // Flux retries a download inside the reconcile (9 retries, 5s..30s apart: over three
    // minutes); with one worker, every other Kustomization would wait that long.
    let (client, ns, server) = setup("kc-retry").await;
    let n = ns.name.as_str();
    // The default --artifact-fetch-retries (9) applies.
    let controller = ControllerProcess::start(n, &["--concurrent=1"]);
    let down_url = server.route(&format!("/{n}/down.tar.gz"), Reply::Status(503));
    crate::support::artifacts::source_crds(&client).await;
    publish_artifact(
        &client,
        SourceKind::GitRepository,
        n,
        "down",
        artifact_json(&down_url, REV1, b"never served"),
    )
    .await;
    let mut broken = spec(n, json!({"sourceRef": {"kind": "GitRepository", "name": "down"}}));
    broken["retryInterval"] = json!("10m");
    apply_kustomization(&client, n, "broken", broken).await;
    eventually("the first download attempt", Duration::from_secs(30), || async {
        (server.hits(&format!("/{n}/down.tar.gz")) >= 1).then_some(())
    })
    .await;

    let objects = config_maps(&[("a", "one")]);
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[("kustomization.yaml", KUSTOMIZATION), ("objects.yaml", &objects)],
    )
    .await;
    apply_kustomization(&client, n, "good", spec(n, json!({}))).await;
    wait_ready(
        &client,
        &controller,
        n,
        "good",
        "True",
        &format!("Applied revision: {REV1}"),
    )
    .await;
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("one"));

    // The broken one keeps being retried (5s, then 10s later), and says why it is not ready.
    let ks = wait_ready(&client, &controller, n, "broken", "False", &down_url).await;
    assert_eq!(condition(&ks, "Ready").unwrap().reason, "ArtifactFailed");
    assert!(
        condition(&ks, "Ready").unwrap().message.contains("503"),
        "{:?}",
        condition(&ks, "Ready")
    );
    eventually(
        "a retry well before retryInterval",
        Duration::from_secs(40),
        || async { (server.hits(&format!("/{n}/down.tar.gz")) >= 3).then_some(()) },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn a_labelled_config_map_change_reconciles_the_kustomizations_reading_it() {
    let (client, ns, server) = setup("kc-cfg").await;
    let n = ns.name.as_str();
    let controller = ControllerProcess::start(n, &[]);
    let vars: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let settings = |greeting: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "vars", "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
            "data": {"greeting": greeting}})
    };
    let params = PatchParams::apply("test").force();
    vars.patch("vars", &params, &Patch::Apply(settings("hello")))
        .await
        .unwrap();
    publish(
        &client,
        &server,
        n,
        "repo",
        REV1,
        &[
            ("kustomization.yaml", KUSTOMIZATION),
            ("objects.yaml", &config_maps(&[("a", "${greeting}")])),
        ],
    )
    .await;
    // A 10m interval: only the watch can bring the new value within the wait below.
    let substitute = json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}});
    apply_kustomization(&client, n, "app", spec(n, substitute)).await;
    wait_ready(
        &client,
        &controller,
        n,
        "app",
        "True",
        &format!("Applied revision: {REV1}"),
    )
    .await;
    assert_eq!(config_map_value(&client, n, "a").await.as_deref(), Some("hello"));

    vars.patch("vars", &params, &Patch::Apply(settings("hi")))
        .await
        .unwrap();
    eventually("the new value applied", Duration::from_secs(30), || async {
        (config_map_value(&client, n, "a").await.as_deref() == Some("hi")).then_some(())
    })
    .await;
    ns.delete().await;
}
