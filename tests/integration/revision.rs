//! A new revision costs what it changes: the fingerprints of the objects it leaves as they were
//! survive it, so the controller's requests grow with the changed objects, not with all of them.

use std::collections::BTreeMap;

use serde_json::json;

use crate::support::controller::{ControllerProcess, Scenario};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";

/// ConfigMaps in one applied revision.
const N: usize = 200;

/// The controller's API requests so far, by `verb resource`.
async fn requests(controller: &ControllerProcess) -> BTreeMap<String, f64> {
    let counts = controller.api_requests().await;
    counts
        .into_iter()
        .map(|((verb, resource), n)| (format!("{verb} {resource}"), n))
        .collect()
}

/// ConfigMaps `cm-0`..`cm-{N-1}`; those in `changed` carry `value2` instead of `value1`.
fn config_maps(changed: &[usize]) -> String {
    (0..N)
        .map(|i| {
            let value = if changed.contains(&i) { "value2" } else { "value1" };
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: {value}-{i}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test]
async fn applier_new_revision_changing_two_of_many_objects_costs_requests_for_those_two() {
    let s = Scenario::new("kc-revision").await;
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(&[])).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;

    let before = requests(&controller).await;
    s.publish_objects("repo", REV2, &config_maps(&[7, 123])).await;
    s.wait_applied(&controller, "app", REV2).await;
    let after = requests(&controller).await;

    let made: BTreeMap<&str, f64> = after
        .iter()
        .map(|(key, n)| (key.as_str(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let config_map_requests: f64 = made
        .iter()
        .filter(|(key, _)| key.ends_with(" configmaps"))
        .map(|(_, n)| n)
        .sum();
    let total: f64 = made.values().sum();
    eprintln!("requests for the new revision: {total} in all, {config_map_requests} on ConfigMaps: {made:?}");
    assert!(
        config_map_requests < 20.0,
        "a revision changing 2 of {N} ConfigMaps sends at most a few requests about ConfigMaps: {made:?}"
    );
    assert!(
        total < 40.0,
        "a revision changing 2 of {N} ConfigMaps costs a small constant besides: {made:?}"
    );
    for i in [7, 123] {
        assert_eq!(
            s.config_map_value(&format!("cm-{i}")).await.as_deref(),
            Some(format!("value2-{i}").as_str()),
            "cm-{i} carries the new revision"
        );
    }
    assert_eq!(
        s.config_map_value("cm-8").await.as_deref(),
        Some("value1-8"),
        "an unchanged ConfigMap stays as it was"
    );
    s.delete().await;
}
