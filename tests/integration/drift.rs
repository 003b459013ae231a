//! Quiet is free, drift is seen at once: one shared metadata watch per kind keeps the no-op
//! fingerprints current, so a quiet interval sends no request, and the annotation
//! `kustomize.toolkit.fluxcd.io/drift: correct` corrects an out-of-band change without waiting
//! for the interval. Without it, the interval corrects as in Flux.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::controller::{ControllerProcess, Scenario};
use crate::support::eventually;

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const DRIFT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/drift";

/// ConfigMaps `cm-0`..`cm-{n-1}` with `value: v-<i>`.
fn config_maps(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: v-{i}\n")
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Kustomization `name` with [`Scenario::spec`] and `overrides`, annotated with `annotations`.
async fn apply_annotated(s: &Scenario, name: &str, overrides: Value, annotations: Value) {
    let object = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": s.namespace(), "annotations": annotations},
        "spec": s.spec(overrides),
    });
    Api::<kustomize_controller::api::Kustomization>::namespaced(s.client.clone(), s.namespace())
        .patch(
            name,
            &PatchParams::apply("e2e-tests").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply Kustomization {name}: {e}"));
}

fn config_map_api(s: &Scenario) -> Api<ConfigMap> {
    Api::namespaced(s.client.clone(), s.namespace())
}

/// What `kubectl edit` does: a write of `data.value` by a field manager of its own.
async fn edit(s: &Scenario, name: &str, value: &str) {
    config_map_api(s)
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kubectl-edit".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"value": value}})),
        )
        .await
        .unwrap_or_else(|e| panic!("edit {name}: {e}"));
}

async fn successful_runs(controller: &ControllerProcess) -> f64 {
    controller
        .metric("kustomize_controller_reconciles_total{result=\"success\"}")
        .await
        .unwrap_or(0.0)
}

/// The controller's API requests so far by `verb resource`, long-running watches left out:
/// a watch is re-established every few minutes whatever the intervals do.
async fn requests(controller: &ControllerProcess) -> BTreeMap<String, f64> {
    controller
        .api_requests()
        .await
        .into_iter()
        .filter(|((verb, _), _)| verb != "watch")
        .map(|((verb, resource), n)| (format!("{verb} {resource}"), n))
        .collect()
}

#[tokio::test]
async fn drift_a_quiet_interval_sends_no_request_once_the_watch_synced() {
    let s = Scenario::new("kc-drift-quiet").await;
    let controller = s.start_controller(&["--interval-jitter-percentage=0"]);
    s.publish_objects("repo", REV1, &config_maps(5)).await;
    s.apply("app", json!({"interval": "1s"})).await;
    s.wait_applied(&controller, "app", REV1).await;
    controller.wait_live_watch_synced("v1/configmaps").await;
    // the pass that ran while the watch was starting may still have listed: start after it
    let first = successful_runs(&controller).await;
    eventually("one more pass", Duration::from_secs(30), || async {
        (successful_runs(&controller).await > first).then_some(())
    })
    .await;

    let before = requests(&controller).await;
    let start = successful_runs(&controller).await;
    eventually("three quiet passes", Duration::from_secs(30), || async {
        (successful_runs(&controller).await >= start + 3.0).then_some(())
    })
    .await;
    let after = requests(&controller).await;
    // Events aside: the success event goes out on every run, as Flux sends it (a repeat of an
    // identical one, should two runs take the same time, raises the first one's count).
    let made: BTreeMap<&str, f64> = after
        .iter()
        .filter(|(key, _)| !key.starts_with("create events.") && !key.starts_with("patch events."))
        .map(|(key, n)| (key.as_str(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let passes = successful_runs(&controller).await - start;
    eprintln!("requests during {passes} quiet passes: {made:?}");
    assert!(made.is_empty(), "a quiet interval sends no request: {made:?}");
    assert_eq!(s.config_map_value("cm-3").await.as_deref(), Some("v-3"));
    s.delete().await;
}

#[tokio::test]
async fn drift_correct_restores_an_edit_and_a_deleted_object_at_once() {
    let s = Scenario::new("kc-drift-correct").await;
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(3)).await;
    // the interval is 10 minutes: only the watch can bring the pass that corrects
    apply_annotated(&s, "app", json!({}), json!({DRIFT_ANNOTATION: "correct"})).await;
    s.wait_applied(&controller, "app", REV1).await;
    controller.wait_live_watch_synced("v1/configmaps").await;

    edit(&s, "cm-1", "edited").await;
    let edited = Instant::now();
    eventually("the edit corrected", Duration::from_secs(60), || async {
        (s.config_map_value("cm-1").await.as_deref() == Some("v-1")).then_some(())
    })
    .await;
    eprintln!("edit corrected in {:?}", edited.elapsed());

    let uid = config_map_api(&s).get("cm-2").await.unwrap().metadata.uid;
    config_map_api(&s)
        .delete("cm-2", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    let recreated = eventually(
        "the deleted ConfigMap recreated",
        Duration::from_secs(60),
        || async {
            let cm = config_map_api(&s).get_opt("cm-2").await.ok()??;
            (cm.metadata.uid != uid).then_some(cm)
        },
    )
    .await;
    eprintln!("deleted object recreated in {:?}", deleted.elapsed());
    assert_eq!(
        recreated
            .data
            .unwrap_or_default()
            .get("value")
            .map(String::as_str),
        Some("v-2")
    );
    s.delete().await;
}

#[tokio::test]
async fn drift_without_the_annotation_waits_for_the_next_pass() {
    let s = Scenario::new("kc-drift-flux").await;
    let controller = s.start_controller(&[]);
    s.publish_objects("repo", REV1, &config_maps(2)).await;
    s.apply("app", json!({})).await;
    s.wait_applied(&controller, "app", REV1).await;
    controller.wait_live_watch_synced("v1/configmaps").await;

    edit(&s, "cm-0", "edited").await;
    // what `drift: correct` would have corrected by now (in about a second) is left to the
    // interval (no count of passes: a late one of the first apply may run before the edit)
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        s.config_map_value("cm-0").await.as_deref(),
        Some("edited"),
        "the edit stays until the interval"
    );

    // the next pass (what the interval runs) corrects it, as in Flux
    let requested = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}});
    Api::<kustomize_controller::api::Kustomization>::namespaced(s.client.clone(), s.namespace())
        .patch("app", &PatchParams::default(), &Patch::Merge(requested))
        .await
        .unwrap();
    eventually(
        "the edit corrected by the next pass",
        Duration::from_secs(60),
        || async { (s.config_map_value("cm-0").await.as_deref() == Some("v-0")).then_some(()) },
    )
    .await;
    s.delete().await;
}

/// The Ready message of Kustomization `name`.
async fn ready_message(s: &Scenario, name: &str) -> String {
    let ks = s.get(name).await.expect("the Kustomization");
    crate::support::controller::condition(&ks, "Ready")
        .map(|c| c.message)
        .unwrap_or_default()
}

/// Kustomization `app` with `drift: warn` and `interval` over `objects` (revision `REV1`),
/// applied, its ConfigMaps watched.
async fn warned_app(prefix: &str, interval: &str, objects: &str) -> (Scenario, ControllerProcess) {
    let s = Scenario::new(prefix).await;
    let controller = s.start_controller(&["--interval-jitter-percentage=0"]);
    s.publish_objects("repo", REV1, objects).await;
    apply_annotated(
        &s,
        "app",
        json!({"interval": interval}),
        json!({DRIFT_ANNOTATION: "warn"}),
    )
    .await;
    s.wait_applied(&controller, "app", REV1).await;
    controller.wait_live_watch_synced("v1/configmaps").await;
    (s, controller)
}

/// Edits ConfigMap `name` and waits until app's Ready message reports it; the reported text.
async fn edit_reported(s: &Scenario, name: &str) -> String {
    edit(s, name, "edited").await;
    let edited = format!("ConfigMap/{}/{name} (data.value)", s.namespace());
    eventually("the edit reported", Duration::from_secs(60), || async {
        ready_message(s, "app").await.contains(&edited).then_some(())
    })
    .await;
    edited
}

/// The notes of app's `DriftDetected` Warning events.
async fn drift_warnings(s: &Scenario) -> Vec<String> {
    s.events("app")
        .await
        .into_iter()
        .filter(|(type_, reason, _, _)| type_ == "Warning" && reason == "DriftDetected")
        .map(|(_, _, note, _)| note)
        .collect()
}

#[tokio::test]
async fn drift_warn_reports_an_edit_and_a_delete_and_leaves_both() {
    let (s, controller) = warned_app("kc-drift-warn", "2s", &config_maps(3)).await;
    let n = s.namespace().to_string();

    let edited = edit_reported(&s, "cm-1").await;
    config_map_api(&s)
        .delete("cm-2", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = format!("ConfigMap/{n}/cm-2 (deleted)");
    eventually("the delete reported", Duration::from_secs(60), || async {
        ready_message(&s, "app").await.contains(&deleted).then_some(())
    })
    .await;

    // two more intervals: still reported, still left in place
    let start = successful_runs(&controller).await;
    eventually("two more passes", Duration::from_secs(30), || async {
        (successful_runs(&controller).await >= start + 2.0).then_some(())
    })
    .await;
    let ks = s.get("app").await.unwrap();
    let ready = crate::support::controller::condition(&ks, "Ready").unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");
    assert!(
        ready.message.starts_with(&format!("Applied revision: {REV1}\n"))
            && ready.message.contains(&edited)
            && ready.message.contains(&deleted),
        "the Ready message names both: {}",
        ready.message
    );
    assert_eq!(
        s.config_map_value("cm-1").await.as_deref(),
        Some("edited"),
        "the edit stays"
    );
    assert_eq!(
        s.config_map_value("cm-2").await,
        None,
        "the deleted object is not recreated"
    );
    assert_eq!(s.config_map_value("cm-0").await.as_deref(), Some("v-0"));
    let built: BTreeSet<String> = (0..3).map(|i| format!("{n}_cm-{i}__ConfigMap")).collect();
    assert_eq!(
        inventory_ids(&s, "app").await,
        built,
        "the deleted object stays in the inventory, not pruned"
    );
    let warnings = drift_warnings(&s).await;
    assert_eq!(
        warnings.len(),
        2,
        "one Warning per new set of drifted objects: {warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&edited) && !w.contains(&deleted))
            && warnings
                .iter()
                .any(|w| w.contains(&edited) && w.contains(&deleted)),
        "{warnings:?}"
    );
    s.delete().await;
}

/// The ids of Kustomization `name`'s inventory.
async fn inventory_ids(s: &Scenario, name: &str) -> BTreeSet<String> {
    let ks = s.get(name).await.expect("the Kustomization");
    ks.status
        .and_then(|status| status.inventory)
        .map(|inventory| inventory.entries.into_iter().map(|e| e.id).collect())
        .unwrap_or_default()
}

/// The UIDs of the namespace's ConfigMaps named `cm-*`, by name.
async fn config_map_uids(s: &Scenario) -> BTreeMap<String, String> {
    config_map_api(s)
        .list(&Default::default())
        .await
        .expect("list ConfigMaps")
        .items
        .into_iter()
        .filter_map(|cm| Some((cm.metadata.name?, cm.metadata.uid?)))
        .filter(|(name, _)| name.starts_with("cm-"))
        .collect()
}

/// ConfigMaps `cm-0`..`cm-{n-1}`, each with the value `value(i)`.
fn config_maps_valued(n: usize, value: impl Fn(usize) -> String) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: {}\n",
                value(i)
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test]
async fn drift_warn_applies_a_new_revision_that_changes_the_drifted_object() {
    const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
    let (s, controller) = warned_app("kc-drift-warn-rev", "2s", &config_maps(3)).await;
    let uid = config_map_api(&s).get("cm-1").await.unwrap().metadata.uid;

    let edited = edit_reported(&s, "cm-1").await;

    // the source changes that very object: a change, not drift, so it is applied
    let changed = config_maps_valued(3, |i| {
        if i == 1 {
            "from-git".to_string()
        } else {
            format!("v-{i}")
        }
    });
    s.publish_objects("repo", REV2, &changed).await;
    let ks = s.wait_applied(&controller, "app", REV2).await;
    assert_eq!(
        s.config_map_value("cm-1").await.as_deref(),
        Some("from-git"),
        "warn does not block a change from the source"
    );
    let message = crate::support::controller::condition(&ks, "Ready")
        .map(|c| c.message)
        .unwrap_or_default();
    assert!(
        !message.contains("cm-1"),
        "applied, so no longer drifted: {message}"
    );
    assert_eq!(
        config_map_api(&s).get("cm-1").await.unwrap().metadata.uid,
        uid,
        "updated in place"
    );
    let warnings = drift_warnings(&s).await;
    assert!(
        warnings.len() == 1 && warnings[0].contains(&edited),
        "one Warning, for the edit; none when the drift went: {warnings:?}"
    );
    s.delete().await;
}

/// A restarted controller remembers no applied manifest: the build digest of the last
/// successful pass, in the status, tells it that the unchanged build's edited object drifted.
#[tokio::test]
async fn drift_warn_leaves_an_edit_in_place_across_a_controller_restart() {
    let (s, mut first) = warned_app("kc-drift-warn-restart", "1s", &config_maps(3)).await;
    let uids = config_map_uids(&s).await;
    let edited = edit_reported(&s, "cm-1").await;
    first.terminate();

    let second = s.start_controller(&["--interval-jitter-percentage=0"]);
    eventually(
        "three passes after the restart",
        Duration::from_secs(60),
        || async { (successful_runs(&second).await >= 3.0).then_some(()) },
    )
    .await;
    assert_eq!(
        s.config_map_value("cm-1").await.as_deref(),
        Some("edited"),
        "the edit stays after the restart"
    );
    let message = ready_message(&s, "app").await;
    assert!(message.contains(&edited), "still reported: {message}");
    assert_eq!(config_map_uids(&s).await, uids);
    s.delete().await;
}

/// The conditions the withdrawn first attempt at `warn` failed under: many objects, a short
/// interval, edits landing while passes run, and new revisions changing other objects
/// meanwhile. Whatever a pass sees, every built object stays in the inventory and no edited
/// object is deleted (its UID never changes).
#[tokio::test]
async fn drift_warn_under_load_keeps_every_built_object_in_the_inventory() {
    const N: usize = 60;
    const EDITED: std::ops::RangeInclusive<usize> = 1..=8;
    const ROUNDS: usize = 8;
    let revision = |round: usize| format!("main@sha1:{:040x}", round + 2);
    let valued = |round: Option<usize>| {
        config_maps_valued(N, move |i| match round {
            Some(round) if i >= 30 => format!("r{round}-{i}"),
            _ => format!("v-{i}"),
        })
    };
    let (s, controller) = warned_app("kc-drift-warn-load", "1s", &valued(None)).await;
    let n = s.namespace().to_string();
    let uids = config_map_uids(&s).await;
    assert_eq!(uids.len(), N, "{uids:?}");
    let built: BTreeSet<String> = (0..N).map(|i| format!("{n}_cm-{i}__ConfigMap")).collect();
    assert_eq!(inventory_ids(&s, "app").await, built);

    let done = std::sync::atomic::AtomicBool::new(false);
    let load = async {
        for round in 0..ROUNDS {
            for k in EDITED {
                edit(&s, &format!("cm-{k}"), &format!("edited-{round}")).await;
            }
            s.publish_objects("repo", &revision(round), &valued(Some(round)))
                .await;
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let check = async {
        let mut checks = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let inventory = inventory_ids(&s, "app").await;
            assert_eq!(inventory, built, "every built object stays in the inventory");
            let now = config_map_uids(&s).await;
            assert_eq!(now, uids, "no object deleted or recreated");
            checks += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        checks
    };
    let ((), checks) = tokio::join!(load, check);
    assert!(checks > 10, "checked while the load ran: {checks}");

    let last = revision(ROUNDS - 1);
    let ks = s.wait_applied(&controller, "app", &last).await;
    let message = crate::support::controller::condition(&ks, "Ready")
        .map(|c| c.message)
        .unwrap_or_default();
    for k in EDITED {
        assert!(
            message.contains(&format!("ConfigMap/{n}/cm-{k} (data.value)")),
            "the Ready message names cm-{k}: {message}"
        );
        assert_eq!(
            s.config_map_value(&format!("cm-{k}")).await,
            Some(format!("edited-{}", ROUNDS - 1)),
            "the last edit of cm-{k} stays"
        );
    }
    assert_eq!(
        s.config_map_value("cm-35").await,
        Some(format!("r{}-35", ROUNDS - 1)),
        "the new revisions are applied"
    );
    assert_eq!(inventory_ids(&s, "app").await, built);
    assert_eq!(config_map_uids(&s).await, uids);
    s.delete().await;
}
