//! The health waiter against the control plane (controller-manager + fake kubelet).
//! No timed assertions: "fails fast" means a long timeout and a Failed/NotFound verdict.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Patch, PatchParams};
use kustomize_controller::api::kustomization::CustomHealthCheck;
use kustomize_controller::error::StepError;
use kustomize_controller::health::cel::{self, HealthExprs};
use kustomize_controller::health::{HealthError, HealthWatches, Report, Status, WaitTarget, wait};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::{Value, json};

use crate::support::{TestNamespace, client, eventually, install_crd, unique_suffix};

/// Long enough that reaching it means the waiter did not fail fast.
const LONG: Duration = Duration::from_secs(120);
/// For waits meant to time out: long enough for the first list of a watch on a loaded
/// machine, so the timeout reports the object's status rather than "not read yet".
const SHORT: Duration = Duration::from_secs(8);
/// How long test setup may take on a loaded machine.
const SETUP: Duration = Duration::from_secs(30);

/// One health test: a resolver on the test control plane and a namespace of its own.
struct HealthTest {
    client: Client,
    watches: HealthWatches,
    ns: TestNamespace,
}

impl HealthTest {
    async fn new(prefix: &str) -> Self {
        let client = client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        Self {
            watches: HealthWatches::new(ResourceResolver::new(client.clone())),
            client,
            ns,
        }
    }

    fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// Server-side applies `object` into the test namespace.
    async fn apply(&self, object: Value) {
        apply(self.watches.resolver(), Some(self.namespace()), object).await;
    }

    /// Server-side applies a cluster-scoped `object`.
    async fn apply_cluster_scoped(&self, object: Value) {
        apply(self.watches.resolver(), None, object).await;
    }

    /// The object `kind`/`name` of `api_version` in the test namespace, as a health check names it.
    fn target(&self, api_version: &str, kind: &str, name: &str) -> WaitTarget {
        WaitTarget::new(api_version, kind, Some(self.namespace()), name)
    }

    /// Widget `w1` of `group` in the test namespace.
    fn widget(&self, group: &str) -> WaitTarget {
        self.target(&format!("{group}/v1"), "Widget", "w1")
    }

    /// Waits for `targets` by the kstatus rules alone, never canceled.
    async fn wait(&self, targets: &[WaitTarget], timeout: Duration) -> Result<Report, HealthError> {
        self.wait_with(targets, &HealthExprs::default(), timeout).await
    }

    /// Waits for `targets` with the CEL rules `exprs`, never canceled.
    async fn wait_with(
        &self,
        targets: &[WaitTarget],
        exprs: &HealthExprs,
        timeout: Duration,
    ) -> Result<Report, HealthError> {
        wait(&self.watches, targets, exprs, timeout, std::future::pending()).await
    }

    /// Installs the widget CRD of `group` (see [`widget_crd`]).
    async fn install_widgets(&self, group: &str) {
        let crd: CustomResourceDefinition = serde_json::from_value(widget_crd(group)).unwrap();
        install_crd(&self.client, &crd).await;
    }

    /// Installs the widget CRD and creates one widget whose status says Ready=False.
    async fn unready_widget(&self, group: &str) {
        self.install_widgets(group).await;
        self.apply(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}}))
            .await;
        self.set_ready(group, "False", "Provisioning", "waiting for the backend")
            .await;
    }

    /// Writes widget w1's Ready condition, as its controller would.
    async fn set_ready(&self, group: &str, status: &str, reason: &str, message: &str) {
        let patch = json!({"status": {"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": status, "reason": reason, "message": message,
            "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
        }]}});
        self.patch_widget_status(group, patch).await;
    }

    async fn patch_widget_status(&self, group: &str, patch: Value) {
        eventually("patch widget status", SETUP, || async {
            let (api, _) = self
                .watches
                .resolver()
                .api(&format!("{group}/v1"), "Widget", Some(self.namespace()))
                .await
                .ok()?;
            api.patch_status("w1", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .ok()
        })
        .await;
    }

    /// Deletes the widget CRD of each of `groups`, then the namespace.
    async fn delete_with_widgets(self, groups: &[&str]) {
        let crds = kube::Api::<CustomResourceDefinition>::all(self.client.clone());
        for group in groups {
            let _ = crds
                .delete(&format!("widgets.{group}"), &Default::default())
                .await;
        }
        self.delete().await;
    }

    async fn delete(self) {
        self.ns.delete().await;
    }
}

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

/// The pod template annotations that tell the fake kubelet how pods behave.
fn kubelet_behavior(behavior: Option<&str>) -> Value {
    behavior
        .map(|b| json!({"fake-kubelet.e2e/behavior": b}))
        .unwrap_or(json!({}))
}

fn deployment(name: &str, replicas: i64, behavior: Option<&str>, progress_deadline: Option<i64>) -> Value {
    let mut spec = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}, "annotations": kubelet_behavior(behavior)},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]}
        }
    });
    if let Some(seconds) = progress_deadline {
        spec["progressDeadlineSeconds"] = json!(seconds);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec})
}

fn job(name: &str, behavior: Option<&str>) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": kubelet_behavior(behavior)},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "run", "image": "busybox"}]}
            }
        }
    })
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

/// A unique API group for the widget CRD of one test.
fn widget_group() -> String {
    format!("h{}.example.com", unique_suffix())
}

/// A namespaced CRD with a status subresource, unique per test.
pub(crate) fn widget_crd(group: &str) -> Value {
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
async fn a_deployment_rollout_becomes_current() {
    let t = HealthTest::new("health-rollout").await;
    t.apply(deployment("web", 2, None, None)).await;
    // Listed twice (e.g. in healthChecks and the inventory): both entries are answered.
    let web = t.target("apps/v1", "Deployment", "web");
    let targets = [web.clone(), web];

    let report = t.wait(&targets, LONG).await.unwrap();

    assert_eq!(report.objects.len(), 2);
    for object in &report.objects {
        assert_eq!(object.status.status, Status::Current);
        assert_eq!(object.status.message, "Deployment is available. Replicas: 2");
    }
    t.delete().await;
}

#[tokio::test]
async fn a_deployment_that_never_becomes_ready_times_out_naming_it() {
    let t = HealthTest::new("health-never").await;
    t.apply(deployment("stuck", 1, Some("never-ready"), None)).await;
    t.apply(config_map("fine")).await;
    let targets = [
        t.target("v1", "ConfigMap", "fine"),
        t.target("apps/v1", "Deployment", "stuck"),
    ];

    let err = t.wait(&targets, SHORT).await.unwrap_err();

    assert!(matches!(err, HealthError::Timeout(_)), "{err}");
    let message = err.to_string();
    assert!(message.starts_with("timeout waiting for: ["), "{message}");
    assert!(
        message.contains(&format!("Deployment/{}/stuck: InProgress: ", t.namespace())),
        "{message}"
    );
    assert!(
        !message.contains("ConfigMap"),
        "only objects that are not ready are listed: {message}"
    );
    t.delete().await;
}

#[tokio::test]
async fn crashing_pods_make_a_deployment_fail_before_the_timeout() {
    let t = HealthTest::new("health-crash").await;
    t.apply(deployment("crash", 1, Some("fail"), Some(2))).await;
    let targets = [t.target("apps/v1", "Deployment", "crash")];

    let err = t.wait(&targets, LONG).await.unwrap_err();

    assert!(
        matches!(err, HealthError::Failed(_)),
        "expected a fail-fast verdict, got: {err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to stalled resources: [Deployment/{}/crash: Failed: Progress deadline exceeded]",
            t.namespace()
        )
    );
    t.delete().await;
}

#[tokio::test]
async fn a_job_that_succeeds_is_current() {
    let t = HealthTest::new("health-job-ok").await;
    t.apply(job("migrate", None)).await;
    let targets = [t.target("batch/v1", "Job", "migrate")];

    let report = t.wait(&targets, LONG).await.unwrap();

    assert_eq!(report.objects[0].status.message, "Job Completed. succeeded: 1/1");
    t.delete().await;
}

#[tokio::test]
async fn a_job_that_fails_fails_the_wait_before_the_timeout() {
    let t = HealthTest::new("health-job-fail").await;
    t.apply(job("migrate", Some("fail"))).await;
    let targets = [t.target("batch/v1", "Job", "migrate")];

    let err = t.wait(&targets, LONG).await.unwrap_err();

    assert!(matches!(err, HealthError::Failed(_)), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "Job/{}/migrate: Failed: Job Failed. failed: 1/1",
            t.namespace()
        )),
        "{err}"
    );
    t.delete().await;
}

#[tokio::test]
async fn a_crd_becomes_established() {
    let t = HealthTest::new("health-crd").await;
    let group = widget_group();
    t.apply_cluster_scoped(widget_crd(&group)).await;
    let targets = [WaitTarget::new(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
        &format!("widgets.{group}"),
    )];

    let report = t.wait(&targets, LONG).await.unwrap();

    assert_eq!(report.objects[0].status.message, "CRD is established");
    assert_eq!(
        report.objects[0].target.to_string(),
        format!("CustomResourceDefinition/widgets.{group}")
    );
    t.delete_with_widgets(&[&group]).await;
}

#[tokio::test]
async fn a_custom_resource_going_from_ready_false_to_true_becomes_current() {
    let t = HealthTest::new("health-cr").await;
    let group = widget_group();
    t.unready_widget(&group).await;
    let targets = [t.widget(&group)];

    // While Ready=False the widget is in progress, not Current and not Failed.
    let err = t.wait(&targets, SHORT).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "timeout waiting for: [Widget/{}/w1: InProgress: waiting for the backend]",
            t.namespace()
        )
    );

    // Spawned: the waiter must be Send to run on the controller's runtime.
    let waiter = {
        let (watches, targets) = (t.watches.clone(), targets.clone());
        tokio::spawn(async move { wait_uncanceled(&watches, &targets).await })
    };
    t.set_ready(&group, "True", "Provisioned", "backend is serving")
        .await;
    let report = waiter.await.unwrap().unwrap();
    assert_eq!(report.objects[0].status.status, Status::Current);
    assert_eq!(report.objects[0].status.message, "backend is serving");
    t.delete_with_widgets(&[&group]).await;
}

#[tokio::test]
async fn a_custom_resource_stalled_fails_fast_and_cel_rules_override_kstatus() {
    let t = HealthTest::new("health-cel").await;
    let group = widget_group();
    t.unready_widget(&group).await;
    let targets = [t.widget(&group)];

    // A CEL rule calling "Provisioning" a failure makes the same object Failed at once.
    let exprs = cel::compile(&[CustomHealthCheck {
        api_version: format!("{group}/v1"),
        kind: Some("Widget".into()),
        current: "status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')".into(),
        in_progress: None,
        failed: Some("status.conditions.exists(c, c.type == 'Ready' && c.reason == 'Provisioning')".into()),
    }])
    .await
    .unwrap();
    let err = t.wait_with(&targets, &exprs, LONG).await.unwrap_err();
    assert!(matches!(err, HealthError::Failed(_)), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "Widget/{}/w1: Failed: healthCheckExprs failed",
            t.namespace()
        )),
        "{err}"
    );

    // Without CEL: Ready=False plus Stalled=True is Failed by the kstatus rules.
    let stalled = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "size must be even",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "size must be even",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}});
    t.patch_widget_status(&group, stalled).await;
    let err = t.wait(&targets, LONG).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to stalled resources: [Widget/{}/w1: Failed: size must be even]",
            t.namespace()
        )
    );
    t.delete_with_widgets(&[&group]).await;
}

#[tokio::test]
async fn a_custom_resource_without_status_waits_only_if_its_crd_has_a_status_subresource() {
    let t = HealthTest::new("health-nostatus").await;
    let with_status = widget_group();
    let without_status = widget_group();
    let mut plain_crd = widget_crd(&without_status);
    plain_crd["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("subresources");
    for crd in [widget_crd(&with_status), plain_crd] {
        install_crd(&t.client, &serde_json::from_value(crd).unwrap()).await;
    }
    for group in [&with_status, &without_status] {
        t.apply(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"}}))
            .await;
    }

    // No controller has written status yet: kstatus would call it Current; we wait.
    let err = t.wait(&[t.widget(&with_status)], SHORT).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "timeout waiting for: [Widget/{}/w1: InProgress: Waiting for the controller to report status]",
            t.namespace()
        )
    );
    // Without a status subresource nothing will ever report: Current, as in Flux.
    let report = t.wait(&[t.widget(&without_status)], LONG).await.unwrap();
    assert_eq!(report.objects[0].status.message, "Resource is current");
    t.delete_with_widgets(&[&with_status, &without_status]).await;
}

#[tokio::test]
async fn a_health_check_naming_a_missing_object_is_reported_without_waiting_for_the_timeout() {
    let t = HealthTest::new("health-missing").await;
    t.apply(config_map("here")).await;
    let targets = [
        t.target("v1", "ConfigMap", "here"),
        t.target("apps/v1", "Deployment", "typo"),
        t.target("nothing.example.com/v1", "Gadget", "g"),
        t.target("apps/v1/beta", "Deployment", "bad"),
    ];

    let err = t.wait(&targets, LONG).await.unwrap_err();

    assert!(matches!(err, HealthError::NotFound(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to missing resources: [Deployment/{ns}/typo: NotFound: Resource not found; \
             Gadget/{ns}/g: NotFound: no matches for kind \"Gadget\" in version \"nothing.example.com/v1\"; \
             Deployment/{ns}/bad: NotFound: no matches for kind \"Deployment\" in version \"apps/v1/beta\"]",
            ns = t.namespace()
        )
    );
    t.delete().await;
}

#[tokio::test]
async fn a_new_revision_cancels_the_wait() {
    let t = HealthTest::new("health-cancel").await;
    t.apply(deployment("stuck", 1, Some("never-ready"), None)).await;
    let targets = [t.target("apps/v1", "Deployment", "stuck")];
    let (new_revision, revision_rx) = tokio::sync::oneshot::channel::<()>();

    let waiter = {
        let watches = t.watches.clone();
        tokio::spawn(async move {
            let cancel = async move {
                let _ = revision_rx.await;
            };
            wait(&watches, &targets, &HealthExprs::default(), LONG, cancel).await
        })
    };
    new_revision.send(()).unwrap();

    let err = waiter.await.unwrap().unwrap_err();
    assert!(matches!(err, HealthError::Canceled), "{err}");
    assert_eq!(err.reason(), "HealthCheckCanceled");
    t.delete().await;
}

/// Waits of one identity share one watch per kind and namespace: a wait that joins a running
/// watch reads its objects once (a GET for one, a LIST for several) instead of listing and
/// watching, and the watch stops a while after the last wait.
#[tokio::test]
async fn waits_of_one_identity_share_one_watch_per_kind_and_namespace() {
    let t = HealthTest::new("health-shared").await;
    let (client, counts) = crate::support::applier::counted_client().await;
    let watches = HealthWatches::new(ResourceResolver::new(client)).with_linger(Duration::from_secs(1));
    t.apply(deployment("stuck", 1, Some("never-ready"), None)).await;
    for name in ["web", "api", "db"] {
        t.apply(deployment(name, 1, None, None)).await;
    }
    let deployment = |name: &str| t.target("apps/v1", "Deployment", name);

    // The first wait starts the watch and keeps it open.
    let first = {
        let (watches, targets) = (watches.clone(), [deployment("stuck")]);
        tokio::spawn(async move { wait_uncanceled(&watches, &targets).await })
    };
    eventually("the shared watch", SETUP, || async {
        (counts.verb("watch") == 1).then_some(())
    })
    .await;
    assert_eq!(watches.running(), 1);

    counts.reset();
    let report = wait_uncanceled(&watches, &[deployment("web")]).await.unwrap();
    assert_eq!(report.objects[0].status.status, Status::Current);
    let report = wait_uncanceled(&watches, &[deployment("api"), deployment("db")])
        .await
        .unwrap();
    assert!(report.objects.iter().all(|o| o.status.status == Status::Current));
    let err = wait_uncanceled(&watches, &[deployment("missing")])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed early due to missing resources: [Deployment/{}/missing: NotFound: Resource not found]",
            t.namespace()
        )
    );
    let deployments = |verb: &str| {
        counts
            .snapshot()
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == "deployments.apps")
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    assert_eq!(
        (deployments("get"), deployments("list"), deployments("watch")),
        (2, 1, 0),
        "a GET for each wait of one object, a LIST for the wait of two, no watch of their own"
    );
    assert_eq!(watches.running(), 1, "still the one watch");

    first.abort();
    eventually("the watch to stop after its last wait", SETUP, || async {
        (watches.running() == 0).then_some(())
    })
    .await;
    t.delete().await;
}

/// A wait of `targets` on `watches` that is never canceled.
async fn wait_uncanceled(watches: &HealthWatches, targets: &[WaitTarget]) -> Result<Report, HealthError> {
    wait(
        watches,
        targets,
        &HealthExprs::default(),
        LONG,
        std::future::pending(),
    )
    .await
}
