//! Issue 6: the health waiter against the control plane (controller-manager + fake kubelet).
//! No timed assertions: "fails fast" means a long timeout and a Failed/NotFound verdict.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Patch, PatchParams};
use kustomize_controller::api::kustomization::CustomHealthCheck;
use kustomize_controller::health::cel::{self, HealthExprs};
use kustomize_controller::health::{HealthError, Status, WaitTarget, wait};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::{Value, json};

use crate::support::{TestNamespace, client, eventually, install_crd, unique_suffix};

/// Long enough that reaching it means the waiter did not fail fast.
const LONG: Duration = Duration::from_secs(120);
/// For waits meant to time out: long enough for the first list of a watch on a loaded
/// machine, so the timeout reports the object's status rather than "not read yet".
const SHORT: Duration = Duration::from_secs(8);

/// Server-side applies `object` (namespaced into `ns` when given). Retried for a while: right
/// after a CRD is Established its kind can still be missing from discovery or unserved.
async fn apply(resolver: &ResourceResolver, ns: Option<&str>, object: Value) {
    let api_version = object["apiVersion"].as_str().unwrap();
    let kind = object["kind"].as_str().unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let params = PatchParams::apply("health-tests").force();
    eventually(&format!("apply {kind}/{name}"), SETUP, || async {
        let (api, _) = resolver.api(api_version, kind, ns).await.ok()?;
        api.patch(name, &params, &Patch::Apply(&object)).await.ok()
    })
    .await;
}

/// How long test setup may take on a loaded machine.
const SETUP: Duration = Duration::from_secs(30);

fn deployment(name: &str, replicas: i64, behavior: Option<&str>, progress_deadline: Option<i64>) -> Value {
    let annotations = behavior
        .map(|b| json!({"fake-kubelet.e2e/behavior": b}))
        .unwrap_or(json!({}));
    let mut spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]}
        }
    });
    if let Some(seconds) = progress_deadline {
        spec["progressDeadlineSeconds"] = json!(seconds);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec})
}

fn job(name: &str, behavior: Option<&str>) -> Value {
    let annotations = behavior
        .map(|b| json!({"fake-kubelet.e2e/behavior": b}))
        .unwrap_or(json!({}));
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": "busybox"}]}
            }
        }
    })
}

async fn setup(prefix: &str) -> (Client, ResourceResolver, TestNamespace) {
    let client = client().await;
    let ns = TestNamespace::new(&client, prefix).await;
    (client.clone(), ResourceResolver::new(client), ns)
}

fn no_exprs() -> HealthExprs {
    HealthExprs::default()
}

#[tokio::test]
async fn a_deployment_rollout_becomes_current() {
    let (_, resolver, ns) = setup("health-rollout").await;
    apply(&resolver, Some(&ns.name), deployment("web", 2, None, None)).await;
    // Listed twice (e.g. in healthChecks and the inventory): both entries are answered.
    let web = WaitTarget::new("apps/v1", "Deployment", Some(&ns.name), "web");
    let targets = [web.clone(), web];

    let report = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap();

    assert_eq!(report.objects.len(), 2);
    for object in &report.objects {
        assert_eq!(object.status.status, Status::Current);
        assert_eq!(object.status.message, "Deployment is available. Replicas: 2");
    }
    ns.delete().await;
}

#[tokio::test]
async fn a_deployment_that_never_becomes_ready_times_out_naming_it() {
    let (_, resolver, ns) = setup("health-never").await;
    apply(
        &resolver,
        Some(&ns.name),
        deployment("stuck", 1, Some("never-ready"), None),
    )
    .await;
    apply(
        &resolver,
        Some(&ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fine"}}),
    )
    .await;
    let targets = [
        WaitTarget::new("v1", "ConfigMap", Some(&ns.name), "fine"),
        WaitTarget::new("apps/v1", "Deployment", Some(&ns.name), "stuck"),
    ];

    let err = wait(&resolver, &targets, &no_exprs(), SHORT, std::future::pending())
        .await
        .unwrap_err();

    assert!(matches!(err, HealthError::Timeout(_)), "{err}");
    let message = err.to_string();
    assert!(message.starts_with("timeout waiting for: ["), "{message}");
    assert!(
        message.contains(&format!("Deployment/{}/stuck: InProgress: ", ns.name)),
        "{message}"
    );
    assert!(
        !message.contains("ConfigMap"),
        "only objects that are not ready are listed: {message}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn crashing_pods_make_a_deployment_fail_before_the_timeout() {
    let (_, resolver, ns) = setup("health-crash").await;
    apply(
        &resolver,
        Some(&ns.name),
        deployment("crash", 1, Some("fail"), Some(2)),
    )
    .await;
    let targets = [WaitTarget::new("apps/v1", "Deployment", Some(&ns.name), "crash")];

    let err = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap_err();

    assert!(
        matches!(err, HealthError::Failed(_)),
        "expected a fail-fast verdict, got: {err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to stalled resources: [Deployment/{}/crash: Failed: Progress deadline exceeded]",
            ns.name
        )
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_job_that_succeeds_is_current() {
    let (_, resolver, ns) = setup("health-job-ok").await;
    apply(&resolver, Some(&ns.name), job("migrate", None)).await;
    let targets = [WaitTarget::new("batch/v1", "Job", Some(&ns.name), "migrate")];

    let report = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap();

    assert_eq!(report.objects[0].status.message, "Job Completed. succeeded: 1/1");
    ns.delete().await;
}

#[tokio::test]
async fn a_job_that_fails_fails_the_wait_before_the_timeout() {
    let (_, resolver, ns) = setup("health-job-fail").await;
    apply(&resolver, Some(&ns.name), job("migrate", Some("fail"))).await;
    let targets = [WaitTarget::new("batch/v1", "Job", Some(&ns.name), "migrate")];

    let err = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap_err();

    assert!(matches!(err, HealthError::Failed(_)), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "Job/{}/migrate: Failed: Job Failed. failed: 1/1",
            ns.name
        )),
        "{err}"
    );
    ns.delete().await;
}

/// A namespaced CRD with a status subresource, unique per test.
fn widget_crd(group: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

#[tokio::test]
async fn a_crd_becomes_established() {
    let (client, resolver, ns) = setup("health-crd").await;
    let group = format!("h{}.example.com", unique_suffix());
    apply(&resolver, None, widget_crd(&group)).await;
    let targets = [WaitTarget::new(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
        &format!("widgets.{group}"),
    )];

    let report = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap();

    assert_eq!(report.objects[0].status.message, "CRD is established");
    assert_eq!(
        report.objects[0].target.to_string(),
        format!("CustomResourceDefinition/widgets.{group}")
    );
    delete_crd(&client, &group).await;
    ns.delete().await;
}

async fn delete_crd(client: &Client, group: &str) {
    let api = kube::Api::<CustomResourceDefinition>::all(client.clone());
    let _ = api.delete(&format!("widgets.{group}"), &Default::default()).await;
}

/// Installs the widget CRD and creates one widget whose status says Ready=False.
async fn unready_widget(client: &Client, resolver: &ResourceResolver, ns: &str, group: &str) {
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd(group)).unwrap();
    install_crd(client, &crd).await;
    let api_version = format!("{group}/v1");
    apply(
        resolver,
        Some(ns),
        json!({"apiVersion": api_version, "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}}),
    )
    .await;
    set_ready(
        resolver,
        ns,
        group,
        "False",
        "Provisioning",
        "waiting for the backend",
    )
    .await;
}

async fn set_ready(
    resolver: &ResourceResolver,
    ns: &str,
    group: &str,
    status: &str,
    reason: &str,
    message: &str,
) {
    let patch = json!({"status": {"observedGeneration": 1, "conditions": [{
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]}});
    patch_widget_status(resolver, ns, group, patch).await;
}

async fn patch_widget_status(resolver: &ResourceResolver, ns: &str, group: &str, patch: Value) {
    eventually("patch widget status", SETUP, || async {
        let (api, _) = resolver
            .api(&format!("{group}/v1"), "Widget", Some(ns))
            .await
            .ok()?;
        api.patch_status("w1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .ok()
    })
    .await;
}

#[tokio::test]
async fn a_custom_resource_going_from_ready_false_to_true_becomes_current() {
    let (client, resolver, ns) = setup("health-cr").await;
    let group = format!("h{}.example.com", unique_suffix());
    unready_widget(&client, &resolver, &ns.name, &group).await;
    let targets = [WaitTarget::new(
        &format!("{group}/v1"),
        "Widget",
        Some(&ns.name),
        "w1",
    )];

    // While Ready=False the widget is in progress, not Current and not Failed.
    let err = wait(&resolver, &targets, &no_exprs(), SHORT, std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "timeout waiting for: [Widget/{}/w1: InProgress: waiting for the backend]",
            ns.name
        )
    );

    // Spawned: the waiter must be Send to run on the controller's runtime.
    let waiter = {
        let (resolver, targets) = (resolver.clone(), targets.clone());
        tokio::spawn(async move {
            wait(
                &resolver,
                &targets,
                &HealthExprs::default(),
                LONG,
                std::future::pending(),
            )
            .await
        })
    };
    set_ready(
        &resolver,
        &ns.name,
        &group,
        "True",
        "Provisioned",
        "backend is serving",
    )
    .await;
    let report = waiter.await.unwrap().unwrap();
    assert_eq!(report.objects[0].status.status, Status::Current);
    assert_eq!(report.objects[0].status.message, "backend is serving");
    delete_crd(&client, &group).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_custom_resource_stalled_fails_fast_and_cel_rules_override_kstatus() {
    let (client, resolver, ns) = setup("health-cel").await;
    let group = format!("h{}.example.com", unique_suffix());
    unready_widget(&client, &resolver, &ns.name, &group).await;
    let targets = [WaitTarget::new(
        &format!("{group}/v1"),
        "Widget",
        Some(&ns.name),
        "w1",
    )];

    // A CEL rule calling "Provisioning" a failure makes the same object Failed at once.
    let exprs = cel::compile(&[CustomHealthCheck {
        api_version: format!("{group}/v1"),
        kind: Some("Widget".into()),
        current: "status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')".into(),
        in_progress: None,
        failed: Some("status.conditions.exists(c, c.type == 'Ready' && c.reason == 'Provisioning')".into()),
    }])
    .unwrap();
    let err = wait(&resolver, &targets, &exprs, LONG, std::future::pending())
        .await
        .unwrap_err();
    assert!(matches!(err, HealthError::Failed(_)), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("Widget/{}/w1: Failed: healthCheckExprs failed", ns.name)),
        "{err}"
    );

    // Without CEL: Ready=False plus Stalled=True is Failed by the kstatus rules.
    let stalled = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "size must be even",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "size must be even",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}});
    patch_widget_status(&resolver, &ns.name, &group, stalled).await;
    let err = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to stalled resources: [Widget/{}/w1: Failed: size must be even]",
            ns.name
        )
    );
    delete_crd(&client, &group).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_custom_resource_without_status_waits_only_if_its_crd_has_a_status_subresource() {
    let (client, resolver, ns) = setup("health-nostatus").await;
    let with_status = format!("h{}.example.com", unique_suffix());
    let without_status = format!("h{}.example.com", unique_suffix());
    let mut plain_crd = widget_crd(&without_status);
    plain_crd["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("subresources");
    for crd in [widget_crd(&with_status), plain_crd] {
        install_crd(&client, &serde_json::from_value(crd).unwrap()).await;
    }
    for group in [&with_status, &without_status] {
        let widget =
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}});
        apply(&resolver, Some(&ns.name), widget).await;
    }

    // No controller has written status yet: kstatus would call it Current; we wait.
    let awaited = [WaitTarget::new(
        &format!("{with_status}/v1"),
        "Widget",
        Some(&ns.name),
        "w1",
    )];
    let err = wait(&resolver, &awaited, &no_exprs(), SHORT, std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "timeout waiting for: [Widget/{}/w1: InProgress: Waiting for the controller to report status]",
            ns.name
        )
    );
    // Without a status subresource nothing will ever report: Current, as in Flux.
    let plain = [WaitTarget::new(
        &format!("{without_status}/v1"),
        "Widget",
        Some(&ns.name),
        "w1",
    )];
    let report = wait(&resolver, &plain, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap();
    assert_eq!(report.objects[0].status.message, "Resource is current");
    delete_crd(&client, &with_status).await;
    delete_crd(&client, &without_status).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_health_check_naming_a_missing_object_is_reported_without_waiting_for_the_timeout() {
    let (_, resolver, ns) = setup("health-missing").await;
    apply(
        &resolver,
        Some(&ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "here"}}),
    )
    .await;
    let targets = [
        WaitTarget::new("v1", "ConfigMap", Some(&ns.name), "here"),
        WaitTarget::new("apps/v1", "Deployment", Some(&ns.name), "typo"),
        WaitTarget::new("nothing.example.com/v1", "Gadget", Some(&ns.name), "g"),
        WaitTarget::new("apps/v1/beta", "Deployment", Some(&ns.name), "bad"),
    ];

    let err = wait(&resolver, &targets, &no_exprs(), LONG, std::future::pending())
        .await
        .unwrap_err();

    assert!(matches!(err, HealthError::NotFound(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to missing resources: [Deployment/{ns}/typo: NotFound: Resource not found; \
             Gadget/{ns}/g: NotFound: no matches for kind \"Gadget\" in version \"nothing.example.com/v1\"; \
             Deployment/{ns}/bad: NotFound: no matches for kind \"Deployment\" in version \"apps/v1/beta\"]",
            ns = ns.name
        )
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_new_revision_cancels_the_wait() {
    let (_, resolver, ns) = setup("health-cancel").await;
    apply(
        &resolver,
        Some(&ns.name),
        deployment("stuck", 1, Some("never-ready"), None),
    )
    .await;
    let targets = [WaitTarget::new("apps/v1", "Deployment", Some(&ns.name), "stuck")];
    let (new_revision, revision_rx) = tokio::sync::oneshot::channel::<()>();

    let waiter = {
        let resolver = resolver.clone();
        tokio::spawn(async move {
            let cancel = async move {
                let _ = revision_rx.await;
            };
            wait(&resolver, &targets, &HealthExprs::default(), LONG, cancel).await
        })
    };
    new_revision.send(()).unwrap();

    let err = waiter.await.unwrap().unwrap_err();
    assert!(matches!(err, HealthError::Canceled), "{err}");
    assert_eq!(err.reason(), "HealthCheckCanceled");
    ns.delete().await;
}
