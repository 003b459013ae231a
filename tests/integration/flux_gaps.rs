//! Where a read of Flux v1.10.1 found us different (issue 31), against the real control plane:
//! Flux's feature gates as a Flux Deployment sets them, and behaviours seen from outside the
//! process.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kustomize_controller::api::Kustomization;
use serde_json::json;

use crate::support::controller::Scenario;
use crate::support::eventually;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: one\n";

// Before, `--feature-gates=DisableCommitStatusEvent=true` stopped the controller at start
// ("unrecognized feature gate"), so a Flux Deployment that set it crash-looped.
#[tokio::test]
async fn disable_commit_status_event_starts_and_sends_no_success_event() {
    let s = Scenario::new("kc-gate-commit").await;
    let controller = s.start_controller(&["--feature-gates=DisableCommitStatusEvent=true"]);
    s.publish_objects("repo", REV1, CONFIG_MAP).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;
    // The change-set event goes out in the same pass, just before the success event would.
    eventually("the change-set event", Duration::from_secs(10), || async {
        let events = s.events("app").await;
        events
            .iter()
            .any(|(_, reason, _, _)| reason == "Progressing")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = s.events("app").await;
    assert!(
        !events
            .iter()
            .any(|(_, reason, _, meta)| reason == "ReconciliationSucceeded"
                || meta.get("kustomize.toolkit.fluxcd.io/commit_status").is_some()),
        "no commit-status event with the gate set: {events:?}"
    );
    s.delete().await;
}

// Before, `wait: true` over a tree holding the Kustomization itself (the flux-system bootstrap)
// waited on its own Ready, Unknown while it waits, until the timeout: HealthCheckFailed.
#[tokio::test]
async fn wait_leaves_the_kustomization_itself_out() {
    let s = Scenario::new("kc-wait-self").await;
    let controller = s.start_controller(&[]);
    let spec = s.spec(json!({"wait": true, "timeout": "15s"}));
    let itself = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "app"}, "spec": spec,
    });
    let objects = format!("{CONFIG_MAP}---\n{}\n", serde_json::to_string(&itself).unwrap());
    s.publish_objects("repo", REV1, &objects).await;
    s.apply("app", json!({"wait": true, "timeout": "15s"})).await;
    let ks = s.wait_applied(&controller, "app", REV1).await;
    let healthy = crate::support::controller::condition(&ks, "Healthy").expect("checked");
    assert_eq!(healthy.status, "True", "{healthy:?}");
    s.delete().await;
}

// Before, a value from a postBuild.substituteFrom Secret that the API server echoed in an
// apply error was shown in the Ready condition and the Warning event (Flux masks it since
// v1.9.6); only SOPS-decrypted values were masked.
#[tokio::test]
async fn substitute_from_secret_values_are_masked_in_apply_errors() {
    let s = Scenario::new("kc-mask-vars").await;
    let value = "not a label value 7e1d";
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("vars".into()),
            ..Default::default()
        },
        string_data: Some([("team".to_string(), value.to_string())].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(s.client.clone(), s.namespace())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let controller = s.start_controller(&[]);
    let labelled = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    team: ${team}\ndata:\n  value: one\n";
    s.publish_objects("repo", REV1, labelled).await;
    s.apply(
        "app",
        json!({"postBuild": {"substituteFrom": [{"kind": "Secret", "name": "vars"}]}}),
    )
    .await;
    let ks = s.wait_ready(&controller, "app", "False", "Invalid value").await;
    let ready = crate::support::controller::condition(&ks, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationFailed", "{ready:?}");
    assert!(
        !ready.message.contains(value) && ready.message.contains("***"),
        "{}",
        ready.message
    );
    let events = eventually("the failure event", Duration::from_secs(10), || async {
        let events = s.events("app").await;
        events
            .iter()
            .any(|(kind, _, _, _)| kind == "Warning")
            .then_some(events)
    })
    .await;
    for (_, _, note, _) in &events {
        assert!(!note.contains(value), "{note}");
    }
    s.delete().await;
}

// Before, the DirectSourceFetch gate was accepted without effect: a pass read its source from
// the watch cache (a quiet pass sends no request at all).
#[tokio::test]
async fn direct_source_fetch_reads_the_source_from_the_api_each_pass() {
    let s = Scenario::new("kc-gate-direct").await;
    let controller = s.start_controller(&["--feature-gates=DirectSourceFetch=true"]);
    s.publish_objects("repo", REV1, CONFIG_MAP).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;
    let source_reads = || async {
        let requests = controller.api_requests().await;
        let reads = requests
            .get(&(
                "get".to_string(),
                "gitrepositories.source.toolkit.fluxcd.io".to_string(),
            ))
            .copied()
            .unwrap_or(0.0);
        (reads, requests)
    };
    let (before, _) = source_reads().await;
    // A requested pass with nothing else changed, its source in the watch cache.
    let api: Api<Kustomization> = Api::namespaced(s.client.clone(), s.namespace());
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "direct-1"}}});
    api.patch("app", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    eventually("lastHandledReconcileAt", Duration::from_secs(30), || async {
        let status = api.get("app").await.ok()?.status?;
        (status.last_handled_reconcile_at.as_deref() == Some("direct-1")).then_some(())
    })
    .await;
    let (after, requests) = source_reads().await;
    assert!(
        after > before,
        "the pass read its source from the API: {requests:?}"
    );
    s.delete().await;
}
