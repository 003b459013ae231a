//! Health waits that hold no worker: with `--concurrent=1`, Kustomizations waiting for their
//! rollouts are all awaited at once, each concluded by its own verdict, superseded by a new
//! revision and pruned when deleted meanwhile.
//!
//! The rollouts are Widgets (a CRD with a status subresource) whose status the test writes as
//! their controller would. The fake kubelet makes a Deployment's pods ready at once or never,
//! so only a status the test writes turns healthy when the test chooses: that is what lets the
//! tests prove the order of events instead of timing them.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use serde_json::json;

use crate::health::widget_crd;
use crate::support::applier::delete_crd;
use crate::support::controller::{ControllerProcess, Scenario, condition};
use crate::support::receiver::EventReceiver;
use crate::support::{eventually, install_crd, unique_suffix};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
const REV3: &str = "main@sha1:3333333333333333333333333333333333333333";

/// How long a step may take on a loaded machine; far below the waits' own timeouts, so
/// reaching it means a wait held what it should not.
const STEP: Duration = Duration::from_secs(60);

/// A controller scenario with a Widget kind of its own.
struct Parking {
    s: Scenario,
    widgets: ApiResource,
}

impl Parking {
    async fn new(prefix: &str) -> Self {
        let s = Scenario::new(prefix).await;
        let group = format!("{prefix}-{}.example.com", unique_suffix());
        let crd: CustomResourceDefinition = serde_json::from_value(widget_crd(&group)).unwrap();
        install_crd(&s.client, &crd).await;
        let gvk = GroupVersionKind::gvk(&group, "v1", "Widget");
        Self {
            s,
            widgets: ApiResource::from_gvk_with_plural(&gvk, "widgets"),
        }
    }

    fn namespace(&self) -> &str {
        self.s.namespace()
    }

    /// Publishes revision `revision` of GitRepository `repo`: the Widgets `widgets` and the
    /// ConfigMaps `config_maps`.
    async fn publish(&self, repo: &str, revision: &str, widgets: &[&str], config_maps: &[&str]) {
        let widgets = widgets.iter().map(|name| {
            format!(
                "apiVersion: {}\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: 1\n",
                self.widgets.api_version
            )
        });
        let config_maps = config_maps.iter().map(|name| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: one\n")
        });
        let objects: Vec<String> = widgets.chain(config_maps).collect();
        self.s
            .publish_objects(repo, revision, &objects.join("---\n"))
            .await;
    }

    /// Kustomization `name` of `repo` that waits for everything it applies, up to `timeout`.
    async fn apply_waiting(&self, name: &str, repo: &str, timeout: &str) {
        let spec = json!({"wait": true, "timeout": timeout,
            "sourceRef": {"kind": "GitRepository", "name": repo}});
        self.s.apply(name, spec).await;
    }

    fn widget_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.s.client.clone(), self.namespace(), &self.widgets)
    }

    async fn widget_exists(&self, name: &str) -> bool {
        self.widget_api().get_opt(name).await.unwrap().is_some()
    }

    /// Writes Widget `name`'s status as its controller would once it is provisioned.
    async fn set_ready(&self, name: &str) {
        let status = json!({"status": {"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": "True", "reason": "Provisioned", "message": "provisioned",
            "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
        }]}});
        self.widget_api()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    /// Waits until Kustomization `name` reports Flux's health-check progress for `revision`:
    /// Ready=Unknown, Reconciling and Healthy=Unknown saying what is checked.
    async fn wait_checking(
        &self,
        controller: &ControllerProcess,
        name: &str,
        revision: &str,
        timeout: &str,
    ) -> Kustomization {
        let message = format!("Running health checks for revision {revision} with a timeout of {timeout}");
        self.wait_for(
            controller,
            &format!("{name} checking health of {revision}"),
            STEP,
            |ks| {
                let (ready, reconciling, healthy) = (
                    condition(ks, "Ready")?,
                    condition(ks, "Reconciling")?,
                    condition(ks, "Healthy")?,
                );
                let shown = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
                    (c.status.clone(), c.reason.clone(), c.message.clone())
                };
                let progressing = |status: &str, message: &str| {
                    (status.to_string(), "Progressing".to_string(), message.to_string())
                };
                (shown(&ready) == progressing("Unknown", "Reconciliation in progress")
                    && shown(&reconciling) == progressing("True", &message)
                    && shown(&healthy) == progressing("Unknown", &message))
                .then_some(())
            },
        )
        .await;
        self.s.get(name).await.expect("the Kustomization exists")
    }

    /// Polls Kustomization `name` until `check` accepts it; panics with the controller log
    /// after `limit`.
    async fn wait_for(
        &self,
        controller: &ControllerProcess,
        what: &str,
        limit: Duration,
        check: impl Fn(&Kustomization) -> Option<()>,
    ) {
        let name = what.split(' ').next().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ks = self.s.get(name).await;
            if ks.as_ref().and_then(&check).is_some() {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; last status: {:?}\ncontroller log:\n{}",
                    ks.and_then(|k| k.status),
                    controller.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether Kustomization `name` still waits: Ready=Unknown.
    async fn still_checking(&self, name: &str) -> bool {
        let ks = self.s.get(name).await.expect("the Kustomization exists");
        condition(&ks, "Ready").is_some_and(|c| c.status == "Unknown")
    }

    async fn delete(self) {
        let client = self.s.client.clone();
        let crd = format!("widgets.{}", self.widgets.group);
        self.s.delete().await;
        delete_crd(&client, &crd).await;
    }
}

/// The inventory ids of `ks`.
fn inventory_ids(ks: &Kustomization) -> Vec<String> {
    ks.status
        .iter()
        .flat_map(|s| s.inventory.iter())
        .flat_map(|i| i.entries.iter())
        .map(|e| e.id.clone())
        .collect()
}

#[tokio::test]
async fn waiting_rollouts_hold_no_worker_and_each_concludes_on_its_own_verdict() {
    let p = Parking::new("park-two").await;
    let n = p.namespace().to_string();
    let group = p.widgets.group.clone();
    let controller = p.s.start_controller(&["--concurrent=1"]);
    p.publish("repo-a", REV1, &["w-a"], &[]).await;
    p.publish("repo-b", REV1, &["w-b"], &[]).await;

    // The first waits for its Widget with a timeout far beyond this test...
    p.apply_waiting("a", "repo-a", "5m").await;
    let a = p.wait_checking(&controller, "a", REV1, "5m0s").await;
    assert_eq!(
        inventory_ids(&a),
        [format!("{n}_w-a_{group}_Widget")],
        "what is awaited is in the inventory already"
    );
    // ...and the only worker is free for the second meanwhile: it applies and waits too.
    p.apply_waiting("b", "repo-b", "5m").await;
    p.wait_checking(&controller, "b", REV1, "5m0s").await;
    assert!(p.widget_exists("w-b").await, "the second applied");
    assert!(
        p.still_checking("a").await,
        "the second applied while the first still waits"
    );
    eventually("no worker busy while both wait", STEP, || async {
        let busy = controller
            .metric("controller_runtime_active_workers{controller=\"kustomization\"}")
            .await?;
        (busy == 0.0).then_some(())
    })
    .await;

    // Each concludes when its own rollout does, as a pass on the worker would have.
    p.set_ready("w-b").await;
    let b = p.s.wait_applied(&controller, "b", REV1).await;
    let healthy = condition(&b, "Healthy").expect("Healthy is set");
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("True", "Succeeded")
    );
    assert!(
        healthy.message.starts_with("Health check passed in "),
        "{}",
        healthy.message
    );
    assert!(condition(&b, "Reconciling").is_none(), "done reconciling");
    let status = b.status.clone().unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV1));
    assert_eq!(status.last_attempted_revision.as_deref(), Some(REV1));
    assert_eq!(Some(status.observed_generation), b.metadata.generation);
    assert_eq!(
        status.history[0].last_reconciled_status,
        "ReconciliationSucceeded"
    );
    assert_eq!(inventory_ids(&b), [format!("{n}_w-b_{group}_Widget")]);
    assert!(p.still_checking("a").await, "the first waits for its own rollout");

    p.set_ready("w-a").await;
    p.s.wait_applied(&controller, "a", REV1).await;
    let events = eventually("the events of the first", STEP, || async {
        let events = p.s.events("a").await;
        events
            .iter()
            .any(|(_, reason, _, _)| reason == "ReconciliationSucceeded")
            .then_some(events)
    })
    .await;
    let notes = |wanted: &str| -> Vec<String> {
        let matching = events.iter().filter(|(_, reason, _, _)| reason == wanted);
        matching.map(|(_, _, note, _)| note.clone()).collect()
    };
    let progressing = notes("Progressing");
    assert_eq!(
        progressing[0],
        format!("Widget/{n}/w-a created"),
        "the apply announced once"
    );
    assert_eq!(progressing.len(), 2, "{progressing:?}");
    assert!(
        progressing[1].starts_with("Health check passed in "),
        "then the passed health checks: {progressing:?}"
    );
    assert_eq!(notes("ReconciliationSucceeded").len(), 1, "{events:?}");
    p.delete().await;
}

#[tokio::test]
async fn a_rollout_past_its_timeout_fails_the_health_check_without_holding_the_worker() {
    let p = Parking::new("park-timeout").await;
    let n = p.namespace().to_string();
    let controller = p.s.start_controller(&["--concurrent=1"]);
    p.publish("repo-slow", REV1, &["w-slow"], &[]).await;
    p.publish("repo-quick", REV1, &[], &["quick"]).await;

    p.apply_waiting("slow", "repo-slow", "40s").await;
    p.wait_checking(&controller, "slow", REV1, "40s").await;
    let quick = json!({"sourceRef": {"kind": "GitRepository", "name": "repo-quick"}});
    p.s.apply("quick", quick).await;
    p.s.wait_applied(&controller, "quick", REV1).await;
    assert!(
        p.still_checking("slow").await,
        "the other applied while the rollout is awaited"
    );

    // The Widget never reports: the timeout ends the wait, naming it.
    let limit = Duration::from_secs(40) + STEP;
    p.wait_for(&controller, "slow failed", limit, |ks| {
        let ready = condition(ks, "Ready")?;
        (ready.status == "False").then_some(())
    })
    .await;
    let slow = p.s.get("slow").await.unwrap();
    let ready = condition(&slow, "Ready").unwrap();
    assert_eq!(ready.reason, "HealthCheckFailed");
    assert!(
        ready.message.starts_with("health check failed after "),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains("s: timeout waiting for: ["),
        "{}",
        ready.message
    );
    assert!(
        ready.message.contains(&format!("Widget/{n}/w-slow")),
        "{}",
        ready.message
    );
    let healthy = condition(&slow, "Healthy").unwrap();
    assert!(
        healthy.message.starts_with("timeout waiting for: ["),
        "Healthy carries the wait's error alone: {}",
        healthy.message
    );
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("False", "HealthCheckFailed")
    );
    let reconciling = condition(&slow, "Reconciling").unwrap();
    assert_eq!(reconciling.reason, "ProgressingWithRetry");
    let status = slow.status.clone().unwrap();
    assert_eq!(status.last_applied_revision, None, "not applied until healthy");
    assert_eq!(status.last_attempted_revision.as_deref(), Some(REV1));
    assert_eq!(status.history[0].last_reconciled_status, "HealthCheckFailed");
    assert_eq!(inventory_ids(&slow).len(), 1, "the applied Widget is tracked");
    p.delete().await;
}

#[tokio::test]
async fn a_new_revision_supersedes_a_parked_wait_and_a_deletion_prunes_what_it_applied() {
    let p = Parking::new("park-supersede").await;
    let controller = p.s.start_controller(&["--concurrent=1"]);
    p.publish("repo", REV1, &["w1"], &[]).await;
    p.apply_waiting("app", "repo", "5m").await;
    p.wait_checking(&controller, "app", REV1, "5m0s").await;

    // A new revision while waiting: applied and awaited in place of the first.
    p.publish("repo", REV2, &["w1"], &["added"]).await;
    let app = p.wait_checking(&controller, "app", REV2, "5m0s").await;
    assert_eq!(p.s.config_map_value("added").await.as_deref(), Some("one"));
    let status = app.status.unwrap();
    assert_eq!(status.last_attempted_revision.as_deref(), Some(REV2));

    p.set_ready("w1").await;
    let app = p.s.wait_applied(&controller, "app", REV2).await;
    let status = app.status.unwrap();
    assert_eq!(status.last_applied_revision.as_deref(), Some(REV2));
    let concluded: Vec<(&str, &str)> = status
        .history
        .iter()
        .map(|h| {
            let revision = h.metadata.get("revision").map_or("", String::as_str);
            (revision, h.last_reconciled_status.as_str())
        })
        .collect();
    assert_eq!(
        concluded,
        [(REV2, "ReconciliationSucceeded")],
        "the superseded wait concluded nothing"
    );

    // Deleted while waiting for a Widget only the new revision has: everything is pruned.
    p.publish("repo", REV3, &["w1", "w2"], &["added"]).await;
    p.wait_checking(&controller, "app", REV3, "5m0s").await;
    assert!(p.widget_exists("w2").await);
    Api::<Kustomization>::namespaced(p.s.client.clone(), p.namespace())
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Kustomization and what it applied are gone", STEP, || async {
        let gone = p.s.get("app").await.is_none()
            && !p.widget_exists("w1").await
            && !p.widget_exists("w2").await
            && p.s.config_map_value("added").await.is_none();
        gone.then_some(())
    })
    .await;
    p.delete().await;
}

#[tokio::test]
async fn with_the_gate_a_new_revision_cancels_a_parked_wait_as_flux_does() {
    let p = Parking::new("park-cancel").await;
    let n = p.namespace().to_string();
    let dir = tempfile::tempdir().unwrap();
    let receiver = EventReceiver::start(dir.path());
    let controller = p.s.start_controller(&[
        "--feature-gates=CancelHealthCheckOnNewRevision=true",
        &format!("--events-addr={}", receiver.addr),
    ]);
    p.publish("repo", REV1, &["w1"], &[]).await;
    p.apply_waiting("app", "repo", "5m").await;
    p.wait_checking(&controller, "app", REV1, "5m0s").await;

    // A new revision while waiting: the wait is canceled, said so, and the new one runs.
    p.publish("repo", REV2, &["w1"], &["added"]).await;
    let canceled = eventually("the cancellation event", STEP, || async {
        let events = receiver.accepted();
        events.into_iter().find(|e| e["reason"] == "HealthCheckCanceled")
    })
    .await;
    assert_eq!(
        canceled["message"],
        format!("Health checks canceled due to new reconciliation triggered by GitRepository/{n}/repo")
    );
    assert_eq!(canceled["severity"], "info");
    assert_eq!(canceled["action"], "HealthCheck");
    assert_eq!(canceled["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    p.wait_checking(&controller, "app", REV2, "5m0s").await;
    p.set_ready("w1").await;
    let app = p.s.wait_applied(&controller, "app", REV2).await;
    let status = app.status.unwrap();
    let concluded: Vec<&str> = status
        .history
        .iter()
        .map(|h| h.last_reconciled_status.as_str())
        .collect();
    assert_eq!(
        concluded,
        ["ReconciliationSucceeded"],
        "a cancellation is not history"
    );
    let events = p.s.events("app").await;
    let ready_canceled = events
        .iter()
        .find(|(_, reason, _, _)| reason == "HealthCheckCanceled");
    assert!(ready_canceled.is_some_and(|e| e.0 == "Normal"), "{events:?}");
    assert_eq!(receiver.rejected(), "");
    p.delete().await;
}
