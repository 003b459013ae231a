//! What a cold apply costs: the live objects of a kind come from one LIST, and an object that
//! LIST does not show is dry-run as a create straight away, so each new object costs its
//! dry-run and its apply, and nothing else.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kustomize_controller::applier::Action;
use serde_json::{Value, json};

use crate::support::applier::ApplyTest;

/// New ConfigMaps in one apply, besides a few objects of two other kinds.
const N: usize = 150;

fn object(api_version: &str, kind: &str, ns: &str, name: &str, body: Value) -> Value {
    let mut obj =
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}});
    obj.as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    obj
}

#[tokio::test]
async fn cold_apply_costs_a_dry_run_and_an_apply_per_object_and_a_list_per_kind() {
    let t = ApplyTest::new("cold-apply", "cold").await;
    let ns = t.namespace();
    let mut objects: Vec<Value> = (0..N)
        .map(|i| {
            object(
                "v1",
                "ConfigMap",
                ns,
                &format!("cm-{i}"),
                json!({"data": {"k": i.to_string()}}),
            )
        })
        .collect();
    for i in 0..5 {
        objects.push(object(
            "v1",
            "Service",
            ns,
            &format!("svc-{i}"),
            json!({"spec": {"ports": [{"port": 80}]}}),
        ));
        objects.push(object(
            "v1",
            "Secret",
            ns,
            &format!("secret-{i}"),
            json!({"stringData": {"k": "v"}}),
        ));
    }
    let (n, kinds) = (objects.len() as u64, 3);
    // one object exists already, created by someone else and without our labels: no LIST of
    // ours shows it, the dry-run's answer does
    let adopted = object("v1", "ConfigMap", ns, "adopted", json!({"data": {"k": "old"}}));
    Api::<ConfigMap>::namespaced(t.client.clone(), ns)
        .patch("adopted", &PatchParams::apply("someone"), &Patch::Apply(&adopted))
        .await
        .expect("pre-existing ConfigMap");
    objects.push(object(
        "v1",
        "ConfigMap",
        ns,
        "adopted",
        json!({"data": {"k": "new"}}),
    ));

    t.counts.reset();
    let cs = t.apply(objects, "rev1").await.expect("cold apply");
    let snapshot = t.counts.snapshot();
    let made: BTreeMap<String, u64> = snapshot
        .iter()
        .map(|(k, n)| (format!("{} {}", k.verb, k.resource), *n))
        .collect();
    eprintln!("requests of a cold apply of {} objects: {made:?}", n + 1);

    let actions: BTreeMap<String, usize> = cs.entries.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.action.to_string()).or_default() += 1;
        m
    });
    let expected = [(Action::Created, n as usize), (Action::Configured, 1)];
    assert_eq!(
        actions,
        expected.map(|(a, k)| (a.to_string(), k)).into_iter().collect(),
        "{cs}"
    );
    assert_eq!(
        t.config_map("adopted").await.unwrap()["data"]["k"],
        "new",
        "the pre-existing object is taken over"
    );
    assert_eq!(
        t.config_map(&format!("cm-{}", N - 1)).await.unwrap()["data"]["k"],
        (N - 1).to_string()
    );

    let count = |verb: &str| -> u64 {
        snapshot
            .iter()
            .filter(|(k, _)| k.verb == verb)
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(count("list"), kinds, "one LIST per kind: {made:?}");
    assert_eq!(
        count("get"),
        1,
        "a read only for the object the dry-run showed to exist: {made:?}"
    );
    assert_eq!(
        count("dry-run-patch"),
        n + 2,
        "one dry-run per new object, two for the one that exists: {made:?}"
    );
    assert_eq!(count("patch"), n + 1, "one apply per object: {made:?}");
    let about_objects = snapshot.values().sum::<u64>() - count("discovery");
    assert!(
        about_objects <= 2 * (n + 1) + kinds + 2,
        "a cold apply of {} objects costs at most 2 per object and one per kind, besides the \
         read and dry-run of the one that existed: {about_objects} requests, {made:?}",
        n + 1
    );
    t.delete().await;
}
