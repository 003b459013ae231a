//! Moving objects between two Kustomizations of one source in one commit, with the real
//! controller: a Namespace and a ConfigMap in it keep their UIDs whichever Kustomization runs
//! first; two that keep claiming one object are a conflict naming both.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use crate::support::controller::{ControllerProcess, OBJECTS_KUSTOMIZATION as KUSTOMIZATION, Scenario};

const REV1: &str = "main@sha1:1111111111111111111111111111111111111111";
const REV2: &str = "main@sha1:2222222222222222222222222222222222222222";
const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";

/// The objects that move: Namespace `moved` and ConfigMap `cm` in it.
fn moved_objects(moved: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {moved}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: {moved}\ndata:\n  value: kept\n"
    )
}

/// A ConfigMap of the test namespace, so that each Kustomization always builds something.
fn own_objects(namespace: &str, name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n")
}

/// Kustomizations `a` (path ./a) and `b` (path ./b) of GitRepository `repo`; `extra` are added
/// to `who`'s spec.
fn spec_of(s: &Scenario, who: &str, extra: Value) -> Value {
    let mut overrides = json!({"path": format!("./{who}"), "targetNamespace": null});
    overrides
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    s.spec(overrides)
}

struct Move {
    s: Scenario,
    controller: ControllerProcess,
    moved: String,
}

impl Move {
    /// REV1: the objects in `a`; both Kustomizations applied.
    async fn start(prefix: &str) -> Self {
        let s = Scenario::new(prefix).await;
        let controller = s.start_controller(&[]);
        let moved = format!("{}-moved", s.namespace());
        let m = Self { s, controller, moved };
        m.publish(REV1, "a").await;
        m.apply("a", json!({})).await;
        m.apply("b", json!({})).await;
        m.s.wait_applied(&m.controller, "a", REV1).await;
        m.s.wait_applied(&m.controller, "b", REV1).await;
        m
    }

    /// Publishes `revision` with the moved objects in Kustomization `holder`'s path.
    async fn publish(&self, revision: &str, holder: &str) {
        let n = self.s.namespace();
        let moved = moved_objects(&self.moved);
        let (a, b) = (own_objects(n, "a-own"), own_objects(n, "b-own"));
        let (a, b) = if holder == "a" {
            (format!("{a}---\n{moved}"), b)
        } else {
            (a, format!("{b}---\n{moved}"))
        };
        let files = [
            ("a/kustomization.yaml", KUSTOMIZATION),
            ("a/objects.yaml", a.as_str()),
            ("b/kustomization.yaml", KUSTOMIZATION),
            ("b/objects.yaml", b.as_str()),
        ];
        self.s.publish("repo", revision, &files).await;
    }

    async fn apply(&self, who: &str, extra: Value) {
        let spec = spec_of(&self.s, who, extra);
        crate::support::controller::apply_kustomization(&self.s.client, self.s.namespace(), who, spec).await;
    }

    /// Holds `who` back: it depends on a Kustomization that does not exist.
    async fn hold(&self, who: &str) {
        self.apply(who, json!({"dependsOn": [{"name": "gate"}]})).await;
        self.s
            .wait_ready(&self.controller, who, "False", "dependency")
            .await;
    }

    /// The UIDs of the Namespace and the ConfigMap, and who the ConfigMap's labels name.
    async fn live(&self) -> (Option<String>, Option<String>, Option<String>) {
        let ns = Api::<Namespace>::all(self.s.client.clone())
            .get_opt(&self.moved)
            .await
            .unwrap()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none());
        let cm = Api::<ConfigMap>::namespaced(self.s.client.clone(), &self.moved)
            .get_opt("cm")
            .await
            .unwrap()
            .filter(|cm| cm.metadata.deletion_timestamp.is_none());
        let owner = cm
            .as_ref()
            .and_then(|cm| cm.metadata.labels.as_ref()?.get(NAME_LABEL).cloned());
        (
            ns.and_then(|ns| ns.metadata.uid),
            cm.and_then(|cm| cm.metadata.uid),
            owner,
        )
    }

    async fn finish(self) {
        drop(self.controller);
        let _ = Api::<Namespace>::all(self.s.client.clone())
            .delete(&self.moved, &DeleteParams::default())
            .await;
        self.s.delete().await;
    }
}

#[tokio::test]
async fn an_object_moved_out_first_is_kept_and_taken_over() {
    let m = Move::start("kc-move-out").await;
    let (ns_uid, cm_uid, owner) = m.live().await;
    assert!(ns_uid.is_some() && cm_uid.is_some(), "applied by a");
    assert_eq!(owner.as_deref(), Some("a"));

    // b is held back, so a applies REV2 (without the objects) first.
    m.hold("b").await;
    m.publish(REV2, "b").await;
    m.s.wait_applied(&m.controller, "a", REV2).await;
    let (ns_now, cm_now, owner) = m.live().await;
    assert_eq!(
        (&ns_now, &cm_now),
        (&ns_uid, &cm_uid),
        "not deleted while b may take them"
    );
    assert_eq!(owner.as_deref(), Some("a"));

    // b runs REV2 and takes them over.
    m.apply("b", json!({})).await;
    m.s.wait_applied(&m.controller, "b", REV2).await;
    let (ns_now, cm_now, owner) = m.live().await;
    assert_eq!((&ns_now, &cm_now), (&ns_uid, &cm_uid), "same objects");
    assert_eq!(owner.as_deref(), Some("b"));

    // a's next run leaves them to b.
    m.apply("a", json!({"interval": "9m"})).await;
    let a = crate::support::eventually(
        "a's run of the new generation",
        Duration::from_secs(60),
        || async {
            let a = m.s.get("a").await?;
            let applied = a.status.as_ref()?.observed_generation == a.metadata.generation?;
            applied.then_some(a)
        },
    )
    .await;
    let inventory = a.status.and_then(|s| s.inventory).unwrap_or_default();
    assert_eq!(inventory.entries.len(), 1, "only a-own: {inventory:?}");
    assert_eq!(m.live().await, (ns_uid, cm_uid, Some("b".into())));
    m.finish().await;
}

#[tokio::test]
async fn an_object_moved_in_first_is_taken_over_and_kept() {
    let m = Move::start("kc-move-in").await;
    let (ns_uid, cm_uid, _) = m.live().await;

    // a is held back, so b applies REV2 (with the objects) first.
    m.hold("a").await;
    m.publish(REV2, "b").await;
    m.s.wait_applied(&m.controller, "b", REV2).await;
    let (ns_now, cm_now, owner) = m.live().await;
    assert_eq!(
        (&ns_now, &cm_now),
        (&ns_uid, &cm_uid),
        "taken over, not recreated"
    );
    assert_eq!(owner.as_deref(), Some("b"));

    // a runs REV2: the objects are b's now, not pruned.
    m.apply("a", json!({})).await;
    m.s.wait_applied(&m.controller, "a", REV2).await;
    assert_eq!(m.live().await, (ns_uid, cm_uid, Some("b".into())));
    m.finish().await;
}

#[tokio::test]
async fn two_kustomizations_claiming_one_object_conflict_naming_both() {
    let s = Scenario::new("kc-claim").await;
    let n = s.namespace();
    let controller = s.start_controller(&[]);
    let cm = own_objects(n, "shared");
    let files = [
        ("a/kustomization.yaml", KUSTOMIZATION),
        ("a/objects.yaml", cm.as_str()),
        ("b/kustomization.yaml", KUSTOMIZATION),
        ("b/objects.yaml", cm.as_str()),
    ];
    s.publish("repo", REV1, &files).await;
    crate::support::controller::apply_kustomization(&s.client, n, "a", spec_of(&s, "a", json!({}))).await;
    s.wait_applied(&controller, "a", REV1).await;
    crate::support::controller::apply_kustomization(&s.client, n, "b", spec_of(&s, "b", json!({}))).await;
    let ks = s.wait_ready(&controller, "b", "False", "claimed by both").await;
    let ready = crate::support::controller::condition(&ks, "Ready").unwrap();
    assert!(
        ready
            .message
            .contains(&format!("Kustomization {n}/b and Kustomization {n}/a")),
        "{}",
        ready.message
    );
    let live = Api::<ConfigMap>::namespaced(s.client.clone(), n)
        .get("shared")
        .await
        .unwrap();
    assert_eq!(
        live.metadata.labels.unwrap().get(NAME_LABEL).map(String::as_str),
        Some("a")
    );
    s.delete().await;
}
