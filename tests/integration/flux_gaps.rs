//! Where a read of Flux v1.10.1 found us different (issue 31), against the real control plane:
//! Flux's feature gates as a Flux Deployment sets them, and behaviours seen from outside the
//! process.

use std::time::Duration;

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
