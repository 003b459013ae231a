//! The events a Kustomization's passes send, as Flux's kustomize-controller (v1.10.1) sends
//! them, read from the real event receiver (Flux's own event type): one per step (apply,
//! prune, passed health checks), the success event on every successful run, dependencies not
//! ready on every try (one Kubernetes Event counting the repeats), and the source they relate
//! to, uid included.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::{Value, json};

use crate::support::artifacts::source_api;
use crate::support::controller::Scenario;
use crate::support::eventually;
use crate::support::receiver::EventReceiver;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";

fn config_maps(names: &[&str]) -> String {
    let objects = names.iter().map(|name| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: v\n")
    });
    objects.collect::<Vec<_>>().join("---\n")
}

/// The events about Kustomization `name`, as the receiver got them.
fn about<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    let about = events.iter().filter(|e| e["involvedObject"]["name"] == name);
    about.collect()
}

/// The events with `action` and a message starting with `message`.
fn with<'a>(events: &[&'a Value], action: &str, message: &str) -> Vec<&'a Value> {
    let matching = events
        .iter()
        .filter(|e| e["action"] == action && e["message"].as_str().is_some_and(|m| m.starts_with(message)));
    matching.copied().collect()
}

/// Waits until the receiver holds `count` events about `name` with `action` and `message`.
async fn wait_for(
    receiver: &EventReceiver,
    name: &str,
    action: &str,
    message: &str,
    count: usize,
) -> Vec<Value> {
    let what = format!("{count} {action} event(s) about {name} saying {message:?}");
    eventually(&what, Duration::from_secs(90), || async {
        let events = receiver.accepted();
        let found = with(&about(&events, name), action, message).len();
        (found >= count).then_some(events)
    })
    .await
}

#[tokio::test]
async fn each_step_and_every_successful_run_is_announced_as_flux_does() {
    let s = Scenario::new("ev-steps").await;
    let n = s.namespace().to_string();
    let dir = tempfile::tempdir().unwrap();
    let receiver = EventReceiver::start(dir.path());
    let controller = s.start_controller(&[&format!("--events-addr={}", receiver.addr)]);

    s.publish_objects("repo", REV1, &config_maps(&["a", "b"])).await;
    s.apply("app", json!({"wait": true})).await;
    s.wait_applied(&controller, "app", REV1).await;
    let repo = source_api(&s.client, SourceKind::GitRepository, &n)
        .get("repo")
        .await
        .unwrap();
    let events = wait_for(&receiver, "app", "Reconcile", "Reconciliation finished in ", 1).await;
    let app = about(&events, "app");

    // The apply: the objects created, reason Ready's (Progressing while the pass runs).
    let [apply] = with(&app, "Apply", "")[..] else {
        panic!("one apply event: {app:#?}")
    };
    assert_eq!(apply["reason"], "Progressing");
    assert_eq!(apply["severity"], "info");
    assert_eq!(
        apply["message"],
        format!("ConfigMap/{n}/a created\nConfigMap/{n}/b created")
    );
    assert_eq!(apply["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    // Related to the source read, as Flux's recorder references it.
    let related = &apply["relatedObject"];
    assert_eq!(related["kind"], "GitRepository");
    assert_eq!(related["name"], "repo");
    assert_eq!(related["namespace"], n.as_str());
    assert_eq!(related["apiVersion"], "source.toolkit.fluxcd.io/v1");
    assert_eq!(related["uid"].as_str(), repo.metadata.uid.as_deref(), "{apply}");
    assert!(related["resourceVersion"].is_string(), "{apply}");
    let involved = &apply["involvedObject"];
    let ks = s.get("app").await.unwrap();
    assert_eq!(involved["uid"].as_str(), ks.metadata.uid.as_deref(), "{apply}");

    // Health checks that were not passing before: announced.
    let [health] = with(&app, "HealthCheck", "Health check passed in ")[..] else {
        panic!("one health event: {app:#?}")
    };
    assert_eq!(health["reason"], "Progressing");
    assert_eq!(health["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    assert_eq!(health["relatedObject"]["uid"], related["uid"]);

    // The success event, for commit statuses.
    let [success] = with(&app, "Reconcile", "Reconciliation finished in ")[..] else {
        panic!("one success event: {app:#?}")
    };
    assert_eq!(success["reason"], "ReconciliationSucceeded");
    assert_eq!(
        success["metadata"]["kustomize.toolkit.fluxcd.io/commit_status"],
        "update"
    );
    assert_eq!(success["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    assert_eq!(success["relatedObject"]["uid"], related["uid"]);

    // A new revision without b: the prune in an event of its own; the apply changed nothing.
    s.publish_objects("repo", REV2, &config_maps(&["a"])).await;
    s.wait_applied(&controller, "app", REV2).await;
    let events = wait_for(&receiver, "app", "Reconcile", "Reconciliation finished in ", 2).await;
    let app = about(&events, "app");
    let [prune] = with(&app, "Prune", "")[..] else {
        panic!("one prune event: {app:#?}")
    };
    assert_eq!(prune["message"], format!("ConfigMap/{n}/b deleted"));
    assert_eq!(prune["reason"], "Progressing");
    assert_eq!(prune["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV2);
    assert_eq!(
        with(&app, "Apply", "").len(),
        1,
        "REV2 applied nothing new: {app:#?}"
    );
    // Healthy before, and the new revision changed nothing: no health event.
    assert_eq!(with(&app, "HealthCheck", "").len(), 1, "{app:#?}");

    // A run that changes nothing still sends the success event.
    let api = Api::<Kustomization>::namespaced(s.client.clone(), &n);
    let request = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "once-more"}}});
    api.patch("app", &PatchParams::default(), &Patch::Merge(request))
        .await
        .unwrap();
    let events = wait_for(&receiver, "app", "Reconcile", "Reconciliation finished in ", 3).await;
    let app = about(&events, "app");
    let last = with(&app, "Reconcile", "Reconciliation finished in ")[2];
    assert_eq!(last["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV2);
    assert_eq!(
        last["metadata"]["kustomize.toolkit.fluxcd.io/commit_status"],
        "update"
    );
    assert_eq!(receiver.rejected(), "", "the receiver refused some of our events");
    drop(controller);
    s.delete().await;
}

#[tokio::test]
async fn dependencies_not_ready_are_announced_on_every_try() {
    let s = Scenario::new("ev-deps").await;
    let dir = tempfile::tempdir().unwrap();
    let receiver = EventReceiver::start(dir.path());
    let controller = s.start_controller(&[
        &format!("--events-addr={}", receiver.addr),
        "--requeue-dependency=2s",
    ]);
    s.publish_objects("repo", REV1, &config_maps(&["a"])).await;
    s.apply("app", json!({"dependsOn": [{"name": "missing"}]})).await;
    // Ready says the same on every try; Flux announces each one.
    let events = wait_for(
        &receiver,
        "app",
        "CheckDependencies",
        "Dependencies do not meet ready condition, retrying in 2s",
        3,
    )
    .await;
    let app = about(&events, "app");
    let first = with(&app, "CheckDependencies", "")[0];
    assert_eq!(first["reason"], "DependencyNotReady");
    assert_eq!(first["severity"], "info");
    assert_eq!(first["metadata"]["kustomize.toolkit.fluxcd.io/revision"], REV1);
    assert_eq!(first["relatedObject"]["kind"], "GitRepository");
    // Kubernetes keeps one Event for the identical repeats and counts them on its series, as
    // Flux's recorder counts them on the first Event (the patch may trail the notification).
    let api = Api::<Event>::namespaced(s.client.clone(), s.namespace());
    let repeats = eventually(
        "the repeats counted on the Event",
        Duration::from_secs(30),
        || async {
            let list = api.list(&ListParams::default()).await.unwrap();
            let repeats: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("DependencyNotReady"))
                .collect();
            let counted: i32 = repeats
                .iter()
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum();
            (counted >= 3).then_some(repeats)
        },
    )
    .await;
    assert_eq!(repeats.len(), 1, "one Event for the repeats: {repeats:#?}");
    drop(controller);
    s.delete().await;
}
