//! The controller killed with SIGKILL (no shutdown hook runs, as when a node dies or the OOM
//! killer strikes) again and again while it creates a large Kustomization and while it prunes
//! part of it. Each kill point is a state the test observes in the namespace: "at least k of our
//! objects exist" during the first apply, "at most k are left" during the prune. After the last
//! restart the cluster must hold exactly the build, the status inventory must list exactly it,
//! objects kept across the prune must be the same objects (same UIDs), and nothing outside the
//! inventory may carry our owner labels.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::controller::{ControllerProcess, Scenario};

/// Large enough that an apply takes hundreds of API round trips (so the test sees many states
/// mid-apply), small enough that the twenty restarts, each re-applying what exists, finish in
/// under a minute on a shared 2-core machine (300 took 52 s there; 500 took 102 s).
const OBJECTS: usize = 300;
/// Kill points per phase.
const KILLS: usize = 10;
const REV1: &str = "main@sha1:c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";
const REV2: &str = "main@sha1:c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2c2";
const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";

fn object_name(i: usize) -> String {
    format!("cm-{i:04}")
}

/// The revision-2 build keeps the even-numbered objects and drops the odd ones.
fn kept_in_rev2(i: usize) -> bool {
    i.is_multiple_of(2)
}

fn objects_yaml(indices: impl Iterator<Item = usize>) -> String {
    indices
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {}\ndata:\n  value: \"v{i}\"\n",
                object_name(i)
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Sends SIGKILL and reaps the process.
fn sigkill(controller: ControllerProcess) {
    let status = Command::new("kill")
        .arg("-KILL")
        .arg(controller.pid().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -KILL {} failed", controller.pid());
    drop(controller);
}

struct Chaos {
    s: Scenario,
}

impl Chaos {
    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.s.client.clone(), self.s.namespace())
    }

    /// Every ConfigMap in the namespace carrying our name label, as name → (uid, labels).
    async fn labelled(&self) -> BTreeMap<String, (String, BTreeMap<String, String>)> {
        let selector = format!("{NAME_LABEL}=app");
        let list = self
            .config_maps()
            .list_metadata(&ListParams::default().labels(&selector))
            .await
            .expect("list ConfigMaps");
        list.items
            .into_iter()
            .map(|m| {
                let m = m.metadata;
                (
                    m.name.unwrap_or_default(),
                    (m.uid.unwrap_or_default(), m.labels.unwrap_or_default()),
                )
            })
            .collect()
    }

    /// Every ConfigMap in the namespace except the one the API server puts in each namespace,
    /// as name → uid.
    async fn all_config_maps(&self) -> BTreeMap<String, String> {
        let list = self
            .config_maps()
            .list_metadata(&ListParams::default())
            .await
            .expect("list ConfigMaps");
        list.items
            .into_iter()
            .filter_map(|m| {
                let name = m.metadata.name?;
                (name != "kube-root-ca.crt").then(|| (name, m.metadata.uid.unwrap_or_default()))
            })
            .collect()
    }

    /// Starts a controller, waits until the labelled count satisfies `reached`, SIGKILLs it and
    /// returns the count seen at the kill.
    async fn kill_when(&self, what: &str, reached: impl Fn(usize) -> bool) -> usize {
        let controller = self.s.start_controller(&[]);
        let seen = tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                let count = self.labelled().await.len();
                if reached(count) {
                    return count;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        let Ok(count) = seen else {
            let status = self.s.get("app").await.and_then(|ks| ks.status);
            let inventory = status
                .as_ref()
                .and_then(|s| s.inventory.as_ref())
                .map(|i| i.entries.len());
            panic!(
                "controller never reached {what} ({} labelled; status: revision {:?}, {inventory:?} in the inventory, conditions {:?}); log:\n{}",
                self.labelled().await.len(),
                status.as_ref().and_then(|s| s.last_applied_revision.clone()),
                status.as_ref().map(|s| &s.conditions),
                controller.logs()
            );
        };
        sigkill(controller);
        count
    }

    /// Restarts the controller and checks the converged state for `revision`: the cluster, the
    /// inventory and the owner labels all equal the build `expected`.
    async fn converge(&self, revision: &str, expected: &BTreeSet<String>) -> BTreeMap<String, String> {
        let controller = self.s.start_controller(&[]);
        let ks = self.s.wait_applied(&controller, "app", revision).await;
        let n = self.s.namespace();

        let present = self.all_config_maps().await;
        let names: BTreeSet<_> = present.keys().cloned().collect();
        assert_eq!(&names, expected, "the namespace holds exactly the build");

        let entries = ks.status.and_then(|s| s.inventory).unwrap_or_default().entries;
        let ids: Vec<_> = entries.iter().map(|e| e.id.clone()).collect();
        let unique: BTreeSet<_> = ids.iter().cloned().collect();
        assert_eq!(ids.len(), unique.len(), "no inventory entry twice");
        let want: BTreeSet<_> = expected
            .iter()
            .map(|name| format!("{n}_{name}__ConfigMap"))
            .collect();
        assert_eq!(unique, want, "the inventory equals the build");
        assert!(entries.iter().all(|e| e.v == "v1"));

        let labelled = self.labelled().await;
        let labelled_names: BTreeSet<_> = labelled.keys().cloned().collect();
        assert_eq!(
            &labelled_names, expected,
            "owner labels only on inventory objects"
        );
        for (name, (_, labels)) in &labelled {
            assert_eq!(labels.get(NAMESPACE_LABEL).map(String::as_str), Some(n), "{name}");
        }
        drop(controller);
        present
    }
}

#[tokio::test]
async fn sigkill_during_first_apply_and_prune_converges() {
    let s = Scenario::new("kc-chaos").await;
    s.publish_objects("repo", REV1, &objects_yaml(0..OBJECTS)).await;
    s.apply("app", json!({"timeout": "5m"})).await;
    let chaos = Chaos { s };

    // First apply: kill once at least k objects exist, for k spread over the run; each
    // restart must make progress past the last kill before it is killed again.
    let mut last = 0;
    let mut mid_apply = Vec::new();
    for i in 1..=KILLS {
        let threshold = (i * OBJECTS / (KILLS + 4)).max(last + 1);
        last = chaos
            .kill_when(&format!("{threshold} objects"), |count| count >= threshold)
            .await;
        mid_apply.push(last);
    }
    eprintln!("first-apply kill points (objects present): {mid_apply:?}");
    assert!(
        mid_apply.iter().all(|&count| count < OBJECTS),
        "every kill landed before the apply finished: {mid_apply:?}"
    );
    let all: BTreeSet<_> = (0..OBJECTS).map(object_name).collect();
    let before_prune = chaos.converge(REV1, &all).await;

    // Prune: revision 2 drops half. Kill once at most k of our objects are left, for k spread
    // over the deletions; the kept objects must never be touched.
    let kept: BTreeSet<_> = (0..OBJECTS)
        .filter(|&i| kept_in_rev2(i))
        .map(object_name)
        .collect();
    chaos
        .s
        .publish_objects(
            "repo",
            REV2,
            &objects_yaml((0..OBJECTS).filter(|&i| kept_in_rev2(i))),
        )
        .await;
    let dropped = OBJECTS - kept.len();
    let mut last = OBJECTS;
    let mut mid_prune = Vec::new();
    for i in 1..=KILLS {
        // As in the first apply, the kill points stop well short of the end: a kill that lands
        // after the last one tests nothing.
        let threshold = (OBJECTS - i * dropped / (KILLS + 4)).min(last - 1);
        last = chaos
            .kill_when(&format!("at most {threshold} objects"), |count| {
                count <= threshold
            })
            .await;
        mid_prune.push(last);
        let labelled = chaos.labelled().await;
        for name in &kept {
            let uid = labelled.get(name).map(|(uid, _)| uid);
            assert_eq!(
                uid,
                before_prune.get(name),
                "kept object {name} untouched after a kill"
            );
        }
    }
    eprintln!("prune kill points (objects left): {mid_prune:?}");
    assert!(
        mid_prune.iter().all(|&count| count > kept.len()),
        "every kill landed before the prune finished: {mid_prune:?}"
    );
    let after_prune = chaos.converge(REV2, &kept).await;
    for name in &kept {
        assert_eq!(
            after_prune.get(name),
            before_prune.get(name),
            "{name} kept its UID"
        );
    }
    chaos.s.delete().await;
}
