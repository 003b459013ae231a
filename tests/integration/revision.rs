//! A new revision costs what it changes: the fingerprints of the objects it leaves as they were
//! survive it, so the controller's requests grow with the changed objects, not with all of them.
//! A cold apply costs a dry-run and an apply per object, and no LIST of a kind whose shared
//! watch holds none of its objects; waiting for objects Current once written costs nothing.

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

/// The requests made between two snapshots of [`requests`], those that grew.
fn made_between(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

#[tokio::test]
async fn controller_cold_apply_costs_a_dry_run_and_an_apply_per_object() {
    let s = Scenario::new("kc-cold").await;
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(&[])).await;
    let before = requests(&controller).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;
    let made = made_between(&before, &requests(&controller).await);
    eprintln!("requests of a cold apply of {N} ConfigMaps: {made:?}");
    let on = |key: &str| made.get(key).copied().unwrap_or(0.0);
    assert_eq!(
        on("get configmaps"),
        0.0,
        "no reads of objects that do not exist: {made:?}"
    );
    assert_eq!(
        on("dry-run-patch configmaps"),
        N as f64,
        "one dry-run each: {made:?}"
    );
    assert_eq!(on("patch configmaps"), N as f64, "one apply each: {made:?}");
    let per_object: f64 = made
        .iter()
        .filter(|(key, _)| key.ends_with(" configmaps"))
        .filter(|(key, _)| !key.starts_with("list ") && !key.starts_with("watch "))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(per_object, 2.0 * N as f64, "two requests per ConfigMap: {made:?}");
    // Beside them, a number that does not grow with N: the owner-labelled LIST of the plan, the
    // shared metadata watch of the kind and the labelled-ConfigMap watch of substituteFrom
    // started with the controller (each a LIST and a WATCH; either may start or restart inside
    // the window).
    let per_kind = on("list configmaps") + on("watch configmaps");
    assert!(
        per_kind <= 8.0,
        "a handful of LISTs and WATCHes of ConfigMaps: {made:?}"
    );
    s.delete().await;
}

/// A second Kustomization (`second`, spec `overrides` on top of source `repo2`) applies N other
/// ConfigMaps once the shared ConfigMap watch is synced with the first one's; returns the
/// requests its cold apply made.
async fn second_cold_apply(s: &Scenario, overrides: serde_json::Value) -> BTreeMap<String, f64> {
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(&[])).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;
    controller.wait_live_watch_synced("configmaps").await;

    let others = config_maps(&[]).replace("name: cm-", "name: other-");
    s.publish_objects("repo2", REV1, &others).await;
    let before = requests(&controller).await;
    let mut spec = json!({"sourceRef": {"kind": "GitRepository", "name": "repo2"}});
    spec.as_object_mut()
        .unwrap()
        .extend(overrides.as_object().unwrap().clone());
    s.apply("second", spec).await;
    s.wait_applied(&controller, "second", REV1).await;
    made_between(&before, &requests(&controller).await)
}

#[tokio::test]
async fn controller_cold_apply_of_a_watched_kind_sends_no_list() {
    let s = Scenario::new("kc-cold-watched").await;
    // the synced watch of the kind holds none of the second one's ConfigMaps, so no LIST can
    // show one
    let made = second_cold_apply(&s, json!({})).await;
    eprintln!("requests of the second cold apply of {N} ConfigMaps: {made:?}");
    let on = |key: &str| made.get(key).copied().unwrap_or(0.0);
    assert_eq!(
        on("list configmaps"),
        0.0,
        "no LIST of a kind its watch answers: {made:?}"
    );
    assert_eq!(on("get configmaps"), 0.0, "no reads: {made:?}");
    assert_eq!(
        on("dry-run-patch configmaps"),
        N as f64,
        "one dry-run each: {made:?}"
    );
    assert_eq!(on("patch configmaps"), N as f64, "one apply each: {made:?}");
    assert_eq!(
        s.config_map_value(&format!("other-{}", N - 1)).await.as_deref(),
        Some(format!("value1-{}", N - 1).as_str())
    );
    s.delete().await;
}

#[tokio::test]
async fn controller_wait_for_objects_current_as_applied_watches_none_of_them() {
    let s = Scenario::new("kc-wait-settled").await;
    // a ConfigMap is Current once its write returns: the health wait reads none of them
    let made = second_cold_apply(&s, json!({"wait": true})).await;
    eprintln!("requests of a waited cold apply of {N} ConfigMaps: {made:?}");
    let config_maps: BTreeMap<&String, &f64> = made
        .iter()
        .filter(|(key, _)| key.ends_with(" configmaps"))
        .collect();
    let writes = [
        (&"dry-run-patch configmaps".to_string(), &(N as f64)),
        (&"patch configmaps".to_string(), &(N as f64)),
    ];
    assert_eq!(
        config_maps,
        BTreeMap::from(writes),
        "no list, watch or read: {made:?}"
    );
    let ks = s.get("second").await.expect("the Kustomization");
    let healthy = crate::support::controller::condition(&ks, "Healthy").expect("a Healthy condition");
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("True", "Succeeded")
    );
    assert!(
        healthy.message.starts_with("Health check passed"),
        "{}",
        healthy.message
    );
    s.delete().await;
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

    let made = made_between(&before, &after);
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
