//! The server-side-apply resource manager on the real control plane.
//!
//! Expected change-set lines are Flux's (`Kind/namespace/name action`, `Kind/name action` when
//! cluster-scoped); expected object states are what the API server reports.
//!
//! Same-apply dependencies: a Pod whose ServiceAccount comes in the same apply (the test API
//! server runs the ServiceAccount admission plugin, so the Pod's first dry-run really fails); a
//! custom resource in a namespace, both created by the same apply as its CRD (its first dry-run
//! fails because the kind is not served and the namespace is missing; Flux relies on stages for
//! this, we validate the whole apply before writing and retry it in the second pass); and
//! objects guarded by a webhook whose Service has no endpoints (no ordering can fix it; they are
//! retried and reported alone).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kustomize_controller::api::inventory::{ObjectRef, ResourceInventory};
use kustomize_controller::api::kustomization::{DeletionPolicy, IgnoreRule, Selector};
use kustomize_controller::applier::inventory::{inventory_of, stale};
use kustomize_controller::applier::{Action, ApplierOptions, ChangeSet, FailureKind, ObjectDiff, Owner};
use kustomize_controller::error::{Retry, StepError};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::{Value, json};

use crate::support::applier::{
    ApplyTest, applier, applier_with, delete_cluster_object, delete_crd, dry_runs_of, live, request, waits,
};
use crate::support::{TestNamespace, eventually, install_crd, kustomization_crd, unique_suffix};

fn lines(cs: &ChangeSet) -> Vec<String> {
    cs.to_string().lines().map(String::from).collect()
}

fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

fn deployment(ns: &str, name: &str, app: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1", "ports": [{"containerPort": 80}]}]}}}})
}

impl ApplyTest {
    fn configmap(&self, name: &str, data: Value) -> Value {
        configmap(self.namespace(), name, data)
    }

    /// The resourceVersion of a live object in the test namespace.
    async fn rv(&self, api_version: &str, kind: &str, name: &str) -> String {
        let obj = self.live(api_version, kind, name).await.expect("object exists");
        obj["metadata"]["resourceVersion"].as_str().unwrap().to_string()
    }

    /// Writes `data` into a ConfigMap as another field manager, the way a person or tool would.
    async fn edit_as(&self, manager: &str, name: &str, data: Value) {
        let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data});
        self.config_maps()
            .patch(name, &PatchParams::apply(manager).force(), &Patch::Apply(&patch))
            .await
            .expect("edit");
    }

    /// The data of live ConfigMap `name`, which must exist.
    async fn data_of(&self, name: &str) -> Value {
        self.config_map(name).await.expect("ConfigMap exists")["data"].clone()
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), self.namespace())
    }
}

/// Pod `build` running as ServiceAccount `service_account`.
fn pod_running_as(ns: &str, service_account: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "build", "namespace": ns},
        "spec": {"serviceAccountName": service_account, "containers": [{"name": "app", "image": "nginx:1"}]}})
}

fn crd(group: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]}})
}

/// A cluster-scoped `WidgetClass` kind with a status subresource, like GatewayClass.
fn class_crd(group: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgetclasses.{group}")},
        "spec": {"group": group, "scope": "Cluster",
            "names": {"kind": "WidgetClass", "plural": "widgetclasses", "singular": "widgetclass", "listKind": "WidgetClassList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"tier": {"type": "integer"}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

fn widget_class(group: &str, name: &str, tier: Value) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "WidgetClass", "metadata": {"name": name}, "spec": {"tier": tier}})
}

/// An API handle for a kind whose CRD was just installed. Established does not mean discovery
/// lists every version yet, so resolving is retried for a while.
async fn served_api(client: &Client, api_version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let resolver = ResourceResolver::new(client.clone());
    eventually(
        &format!("{kind} {api_version} served"),
        Duration::from_secs(30),
        || async { resolver.api(api_version, kind, ns).await.ok().map(|(api, _)| api) },
    )
    .await
}

#[tokio::test]
async fn a_crd_a_namespace_and_custom_resources_in_them_apply_in_one_go() {
    // The custom resource depends on two objects of the same apply: its CRD and its namespace.
    // Its first dry-run fails (the kind is not served, the namespace does not exist); the second
    // pass applies it once the first stage is in place.
    let (applier, counts, client) = applier().await;
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let ns = format!("applier-crd-{suffix}");
    let owner = Owner::new("apps", "flux-system");
    let objects = vec![
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1", "namespace": ns}, "spec": {"size": 3}}),
        configmap(&ns, "settings", json!({"a": "1"})),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        crd(&group),
    ];
    let cs = applier
        .apply(request(&owner, objects, "rev1", &[]))
        .await
        .expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("CustomResourceDefinition/widgets.{group} created"),
            format!("Namespace/{ns} created"),
            format!("ConfigMap/{ns}/settings created"),
            format!("Widget/{ns}/w1 created"),
        ]
    );
    let widget = live(&client, &format!("{group}/v1"), "Widget", Some(&ns), "w1")
        .await
        .expect("widget exists");
    assert_eq!(widget["spec"]["size"], 3);
    assert_eq!(
        widget["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "apps"
    );
    assert!(
        dry_runs_of(&counts, &format!("widgets.{group}")) >= 2,
        "the widget went through a second pass: {:?}",
        counts.snapshot()
    );

    delete_cluster_object(&client, "v1", "Namespace", &ns).await;
    delete_crd(&client, &format!("widgets.{group}")).await;
}

#[tokio::test]
async fn an_identical_apply_writes_nothing_and_costs_one_list_per_kind() {
    let t = ApplyTest::new("applier-noop", "noop").await;
    let ns = t.namespace();
    let objects = || {
        vec![
            t.configmap("a", json!({"k": "v"})),
            t.configmap("b", json!({"k": "v"})),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "stringData": {"p": "hunter2"}}),
            deployment(ns, "web", "web"),
        ]
    };
    let resource_versions = || async {
        [
            t.rv("v1", "ConfigMap", "a").await,
            t.rv("v1", "Service", "web").await,
            t.rv("v1", "Secret", "s").await,
        ]
    };
    let first = t.apply(objects(), "rev1").await.expect("first apply");
    assert_eq!(first.with_action(Action::Created).count(), 5, "{first}");
    let before = resource_versions().await;

    // the Deployment's controller writes it (revision annotation, status); wait until it is done
    let deployments = Api::<Deployment>::namespaced(t.client.clone(), ns);
    eventually("Deployment settled", Duration::from_secs(60), || async {
        let d = deployments.get("web").await.ok()?;
        let status = d.status?;
        let annotated = d
            .metadata
            .annotations?
            .contains_key("deployment.kubernetes.io/revision");
        (annotated
            && status.observed_generation == d.metadata.generation
            && status.available_replicas == Some(1))
        .then_some(())
    })
    .await;

    // same revision: the fast path; the Deployment, written by its controller since, takes one
    // dry-run, which confirms it unchanged
    let counts = &t.counts;
    counts.reset();
    let second = t.apply(objects(), "rev1").await.expect("second apply");
    assert_eq!(second.with_action(Action::Unchanged).count(), 5, "{second}");
    assert_eq!(counts.verb("patch"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert!(counts.verb("dry-run-patch") <= 1, "{:?}", counts.snapshot());

    // a quiet no-op: one metadata LIST per kind and nothing else
    counts.reset();
    let quiet = t.apply(objects(), "rev1").await.expect("quiet apply");
    assert_eq!(quiet.with_action(Action::Unchanged).count(), 5, "{quiet}");
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert_eq!(counts.total(), 4, "{:?}", counts.snapshot());

    // a new revision with the same objects: their fingerprints hold, so the same quiet no-op
    counts.reset();
    let renewed = t.apply(objects(), "rev2").await.expect("new revision");
    assert_eq!(renewed.with_action(Action::Unchanged).count(), 5, "{renewed}");
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert_eq!(counts.total(), 4, "{:?}", counts.snapshot());

    // after a restart: a full dry-run, still no write
    counts.reset();
    let third = t.apply_restarted(objects(), "rev2").await.expect("third apply");
    assert_eq!(third.with_action(Action::Unchanged).count(), 5, "{third}");
    assert_eq!(counts.verb("patch"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("dry-run-patch"), 5, "{:?}", counts.snapshot());
    // live objects come from one LIST per kind, not a GET each
    assert_eq!(counts.verb("get"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert_eq!(before, resource_versions().await);
    t.delete().await;
}

#[tokio::test]
async fn out_of_band_edits_and_deletions_are_corrected_even_on_the_fast_path() {
    let t = ApplyTest::new("applier-drift", "drift").await;
    let ns = t.namespace();
    let objects = || {
        vec![
            t.configmap("edited", json!({"k": "v"})),
            t.configmap("deleted", json!({"k": "v"})),
            t.configmap("quiet", json!({"k": "v"})),
        ]
    };
    t.apply(objects(), "rev1").await.expect("first apply");

    t.edit_as("someone-else", "edited", json!({"k": "changed"})).await;
    t.config_maps()
        .delete("deleted", &DeleteParams::default())
        .await
        .expect("delete");

    t.counts.reset();
    let cs = t.apply(objects(), "rev1").await.expect("second apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ConfigMap/{ns}/deleted created"),
            format!("ConfigMap/{ns}/edited configured"),
            format!("ConfigMap/{ns}/quiet unchanged"),
        ]
    );
    assert_eq!(t.config_map("edited").await.unwrap()["data"]["k"], "v");
    assert!(t.config_map("deleted").await.is_some());
    // only the two changed objects were dry-run
    assert_eq!(t.counts.verb("dry-run-patch"), 2, "{:?}", t.counts.snapshot());
    t.delete().await;
}

#[tokio::test]
async fn per_object_annotations_are_honoured() {
    let t = ApplyTest::new("applier-annotations", "ann").await;
    let ns = t.namespace();
    let annotated = |name: &str, key: &str, value: &str, data: Value| {
        let mut cm = t.configmap(name, data);
        cm["metadata"]["annotations"] = json!({key: value});
        cm
    };
    const SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
    // `kubectl` created `merged` and `overridden` with an extra key before Flux took them over
    for name in ["merged", "overridden"] {
        let cm = serde_json::from_value(t.configmap(name, json!({"k": "v", "extra": "kubectl"}))).unwrap();
        t.config_maps()
            .create(
                &PostParams {
                    field_manager: Some("kubectl-create".into()),
                    ..Default::default()
                },
                &cm,
            )
            .await
            .unwrap();
    }
    let objects = |v: &str| {
        vec![
            annotated("ignored", SSA, "Ignore", json!({"k": v})),
            annotated(
                "disabled",
                "kustomize.toolkit.fluxcd.io/reconcile",
                "disabled",
                json!({"k": v}),
            ),
            annotated("once", SSA, "IfNotPresent", json!({"k": v})),
            annotated("merged", SSA, "Merge", json!({"k": v})),
            annotated("overridden", SSA, "Override", json!({"k": v})),
        ]
    };
    let cs = t.apply(objects("1"), "rev1").await.expect("apply");
    assert_eq!(
        cs.action_of(&ObjectRef::new("", "ConfigMap", ns, "ignored")),
        Some(Action::Skipped)
    );
    assert!(
        t.config_map("ignored").await.is_none(),
        "ssa: Ignore is never applied"
    );
    assert!(
        t.config_map("disabled").await.is_none(),
        "reconcile: disabled is never applied"
    );
    assert_eq!(t.data_of("once").await, json!({"k": "1"}));
    // Merge keeps kubectl's field; Override takes kubectl's fields over and drops what is not in the manifest
    assert_eq!(t.data_of("merged").await, json!({"k": "1", "extra": "kubectl"}));
    assert_eq!(t.data_of("overridden").await, json!({"k": "1"}));

    // IfNotPresent: created once, never patched again
    let cs = t.apply(objects("2"), "rev2").await.expect("apply");
    assert!(
        lines(&cs).contains(&format!("ConfigMap/{ns}/once skipped")),
        "{cs}"
    );
    assert_eq!(t.data_of("once").await, json!({"k": "1"}));
    assert_eq!(t.data_of("overridden").await, json!({"k": "2"}));

    // reconcile: disabled on the live object protects it from changes
    t.edit_as("someone", "overridden", json!({"k": "hands-off"}))
        .await;
    let protect = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}});
    t.config_maps()
        .patch("overridden", &PatchParams::default(), &Patch::Merge(&protect))
        .await
        .unwrap();
    let cs = t.apply(objects("2"), "rev3").await.expect("apply");
    assert!(
        lines(&cs).contains(&format!("ConfigMap/{ns}/overridden skipped")),
        "{cs}"
    );
    assert_eq!(t.data_of("overridden").await["k"], "hands-off");
    t.delete().await;
}

#[tokio::test]
async fn immutable_field_changes_fail_without_force_and_recreate_with_it() {
    let t = ApplyTest::new("applier-immutable", "imm").await;
    let ns = t.namespace();
    let web = || async { t.live("apps/v1", "Deployment", "web").await.unwrap() };
    t.apply(vec![deployment(ns, "web", "v1")], "rev1")
        .await
        .expect("first apply");
    let uid = web().await["metadata"]["uid"].clone();

    // the selector of a Deployment is immutable
    let err = t
        .apply(vec![deployment(ns, "web", "v2")], "rev2")
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "Deployment/{ns}/web immutable field detected (spec.selector)"
        )),
        "{message}"
    );
    assert_eq!(err.errors[0].kind, FailureKind::Immutable);
    assert_eq!(err.retry(), Retry::RetryInterval);
    assert_eq!(web().await["metadata"]["uid"], uid);

    // force with a change that is also invalid: the object is kept (Flux would delete it)
    let mut invalid = deployment(ns, "web", "v2");
    invalid["spec"]["replicas"] = json!(-1);
    let mut req = t.request(vec![invalid], "rev3");
    req.force = true;
    let err = t.applier.apply(req).await.unwrap_err();
    assert!(err.to_string().contains("spec.replicas"), "{err}");
    assert_eq!(web().await["metadata"]["uid"], uid);

    // the force annotation recreates it
    let mut forced = deployment(ns, "web", "v2");
    forced["metadata"]["annotations"] = json!({"kustomize.toolkit.fluxcd.io/force": "enabled"});
    let cs = t.apply(vec![forced], "rev4").await.expect("forced apply");
    assert_eq!(lines(&cs), [format!("Deployment/{ns}/web created")]);
    let recreated = web().await;
    assert_ne!(recreated["metadata"]["uid"], uid);
    assert_eq!(recreated["spec"]["selector"]["matchLabels"]["app"], "v2");
    t.delete().await;
}

#[tokio::test]
async fn invalid_objects_are_named_and_nothing_else_changes() {
    let t = ApplyTest::new("applier-invalid", "bad").await;
    let ns = t.namespace();
    let objects = vec![
        t.configmap("good", json!({"k": "v"})),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-port", "namespace": ns},
            "spec": {"ports": [{"port": 70000}]}}),
    ];
    t.counts.reset();
    let err = t.apply(objects, "rev1").await.unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("Service/{ns}/bad-port"));
    assert_eq!(err.errors[0].kind, FailureKind::Invalid);
    assert!(
        err.errors[0].message.starts_with("dry-run failed (Invalid): "),
        "{err}"
    );
    assert!(err.errors[0].message.contains("spec.ports[0].port"), "{err}");
    assert_eq!(t.counts.verb("patch"), 0);
    assert!(t.config_map("good").await.is_none());

    // a namespaced object without namespace is an error, never defaulted
    let no_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "floating"}});
    let err = t
        .apply(vec![t.configmap("good", json!({})), no_ns], "rev2")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ConfigMap/floating namespace not specified: ConfigMap is namespaced and metadata.namespace is empty"
    );
    assert!(t.config_map("good").await.is_none());
    t.delete().await;
}

/// A Kustomization object in the test namespace whose `status.inventory` a test sets, to make
/// it claim (or give up) objects.
struct ClaimingKustomization {
    api: Api<DynamicObject>,
    name: String,
}

impl ClaimingKustomization {
    async fn create(t: &ApplyTest, name: &str) -> Self {
        kustomization_crd(&t.client).await;
        let resolver = ResourceResolver::new(t.client.clone());
        let (api, _) = resolver
            .api(
                "kustomize.toolkit.fluxcd.io/v1",
                "Kustomization",
                Some(t.namespace()),
            )
            .await
            .unwrap();
        let obj = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": t.namespace()},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}});
        api.create(&PostParams::default(), &serde_json::from_value(obj).unwrap())
            .await
            .unwrap();
        Self {
            api,
            name: name.into(),
        }
    }

    async fn set_inventory(&self, inventory: Value) {
        let status = json!({"status": {"inventory": inventory}});
        self.api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn two_kustomizations_claiming_one_object_is_a_clear_conflict() {
    let t = ApplyTest::new("applier-conflict", "first").await;
    let ns = t.namespace();
    let second = Owner::new("second", ns);
    let shared = |k: &str| vec![t.configmap("shared", json!({"k": k}))];
    let cs = t.apply(shared("1"), "r").await.unwrap();
    // the first Kustomization records the object in its inventory
    let first = ClaimingKustomization::create(&t, "first").await;
    first
        .set_inventory(serde_json::to_value(inventory_of(&cs)).unwrap())
        .await;

    let err = t
        .applier
        .apply(request(&second, shared("2"), "r", &[]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "ConfigMap/{ns}/shared is claimed by both Kustomization {ns}/second and Kustomization {ns}/first: \
             it is in the inventory of {ns}/first, which has not released it; remove it from one of them"
        )
    );
    let cm = t.config_map("shared").await.unwrap();
    assert_eq!(cm["data"]["k"], "1");
    assert_eq!(
        cm["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "first"
    );

    // once the first no longer lists it, the second takes it over (a move between Kustomizations)
    first.set_inventory(json!({"entries": []})).await;
    t.applier
        .apply(request(&second, shared("2"), "r", &[]))
        .await
        .unwrap();
    let cm = t.config_map("shared").await.unwrap();
    assert_eq!(
        cm["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "second"
    );
    t.delete().await;
}

#[tokio::test]
async fn diff_reports_the_conflict_apply_reports_for_an_object_another_kustomization_lists() {
    let t = ApplyTest::new("applier-diff-conflict", "first").await;
    let ns = t.namespace();
    let second = Owner::new("second", ns);
    let shared = |k: &str| request(&second, vec![t.configmap("shared", json!({"k": k}))], "r", &[]);
    let cs = t
        .apply(vec![t.configmap("shared", json!({"k": "1"}))], "r")
        .await
        .unwrap();
    let first = ClaimingKustomization::create(&t, "first").await;
    first
        .set_inventory(serde_json::to_value(inventory_of(&cs)).unwrap())
        .await;

    let previewed = t.applier.diff(shared("2")).await.unwrap_err();
    assert_eq!(
        previewed.to_string(),
        format!(
            "ConfigMap/{ns}/shared is claimed by both Kustomization {ns}/second and Kustomization {ns}/first: \
             it is in the inventory of {ns}/first, which has not released it; remove it from one of them"
        )
    );
    assert_eq!(previewed.errors[0].kind, FailureKind::Conflict);
    let applied = t.applier.apply(shared("2")).await.unwrap_err();
    assert_eq!(previewed.to_string(), applied.to_string());

    // given up by the first, the take-over shows as a change of the owner label and the data
    first.set_inventory(json!({"entries": []})).await;
    let diffs = t.applier.diff(shared("2")).await.unwrap();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].action, Action::Configured);
    let text = &diffs[0].diff;
    for line in [
        "-    kustomize.toolkit.fluxcd.io/name: first",
        "+    kustomize.toolkit.fluxcd.io/name: second",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
    }
    assert_eq!(
        t.data_of("shared").await,
        json!({"k": "1"}),
        "diff writes nothing"
    );
    t.delete().await;
}

#[tokio::test]
async fn diff_skips_an_existing_if_not_present_object_exactly_as_apply_does() {
    let t = ApplyTest::new("applier-diff-once", "once").await;
    let ns = t.namespace();
    let once = |k: &str| {
        let mut cm = t.configmap("once", json!({"k": k}));
        cm["metadata"]["annotations"] = json!({"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"});
        vec![cm]
    };
    // not there yet: it would be created
    let diffs = t.applier.diff(t.request(once("1"), "rev1")).await.unwrap();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].action, Action::Created);
    t.apply(once("1"), "rev1").await.unwrap();

    let diffs = t.applier.diff(t.request(once("2"), "rev2")).await.unwrap();
    assert_eq!(
        diffs,
        [ObjectDiff {
            object: ObjectRef::new("", "ConfigMap", ns, "once"),
            action: Action::Skipped,
            diff: String::new(),
        }]
    );
    let cs = t.apply(once("2"), "rev2").await.unwrap();
    assert_eq!(lines(&cs), [format!("ConfigMap/{ns}/once skipped")]);
    assert_eq!(t.data_of("once").await, json!({"k": "1"}));
    t.delete().await;
}

#[tokio::test]
async fn diff_reports_the_take_over_from_kubectl_that_apply_makes_without_making_it() {
    // kubectl created the object exactly as the manifest (and the owner labels) have it. Apply
    // takes kubectl's fields over with a managed-fields patch, which makes it "configured"; diff
    // reports the same action and leaves the object alone.
    let t = ApplyTest::new("applier-diff-takeover", "take").await;
    let ns = t.namespace();
    let desired = t.configmap("c", json!({"k": "v"}));
    let mut created = desired.clone();
    created["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "take",
        "kustomize.toolkit.fluxcd.io/namespace": ns});
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..Default::default()
    };
    t.config_maps()
        .create(&params, &serde_json::from_value(created).unwrap())
        .await
        .unwrap();
    let before = t.config_map("c").await.unwrap();

    let diffs = t
        .applier
        .diff(t.request(vec![desired.clone()], "rev1"))
        .await
        .unwrap();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].action, Action::Configured);
    let after = t.config_map("c").await.unwrap();
    assert_eq!(after["metadata"], before["metadata"], "diff wrote nothing");

    let cs = t.apply(vec![desired], "rev1").await.unwrap();
    assert_eq!(lines(&cs), [format!("ConfigMap/{ns}/c configured")]);
    t.delete().await;
}

#[tokio::test]
async fn an_object_that_fails_its_dry_run_keeps_its_managers_and_annotations() {
    // As Flux (ssa's cleanupMetadata runs after the dry-run): the takeover from kubectl and the
    // removal of its last-applied annotation wait for a dry-run that passes.
    let t = ApplyTest::new("applier-cleanup-after", "after").await;
    let ns = t.namespace();
    let last_applied = "kubectl.kubernetes.io/last-applied-configuration";
    let mut created = t.configmap("c", json!({"k": "v"}));
    created["metadata"]["labels"] = json!({"kustomize.toolkit.fluxcd.io/name": "after",
        "kustomize.toolkit.fluxcd.io/namespace": ns});
    created["metadata"]["annotations"] = json!({last_applied: "{}"});
    let params = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..Default::default()
    };
    t.config_maps()
        .create(&params, &serde_json::from_value(created).unwrap())
        .await
        .unwrap();
    let managers = |obj: &Value| -> Vec<String> {
        let entries = obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        entries
            .iter()
            .filter_map(|m| m["manager"].as_str().map(str::to_string))
            .collect()
    };

    let invalid = t.configmap("c", json!({"bad key": "v"}));
    let err = t.apply(vec![invalid], "rev1").await.unwrap_err();
    assert!(err.to_string().contains("dry-run failed"), "{err}");
    let live = t.config_map("c").await.unwrap();
    assert_eq!(live["metadata"]["annotations"][last_applied], "{}", "{live}");
    assert_eq!(managers(&live), ["kubectl-create"], "{live}");

    // A dry-run that passes: taken over and cleaned up.
    let cs = t
        .apply(vec![t.configmap("c", json!({"k": "v"}))], "rev1")
        .await
        .unwrap();
    assert_eq!(lines(&cs), [format!("ConfigMap/{ns}/c configured")]);
    let live = t.config_map("c").await.unwrap();
    assert!(
        live["metadata"]["annotations"].get(last_applied).is_none(),
        "{live}"
    );
    assert!(!managers(&live).contains(&"kubectl-create".to_string()), "{live}");
    t.delete().await;
}

#[tokio::test]
async fn prune_deletes_only_what_is_still_ours() {
    let t = ApplyTest::new("applier-prune", "pruner").await;
    let ns = t.namespace();
    let all = ["kept", "stale", "relabelled", "protected"].map(|name| t.configmap(name, json!({})));
    let first = t.apply(all.to_vec(), "rev1").await.unwrap();
    let relabel = json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/name": "someone-else"}}});
    let protect = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/prune": "disabled"}}});
    for (name, patch) in [("relabelled", relabel), ("protected", protect)] {
        t.config_maps()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    let second = t
        .apply(vec![t.configmap("kept", json!({}))], "rev2")
        .await
        .unwrap();
    let stale_entries = stale(&inventory_of(&first), &inventory_of(&second));
    assert_eq!(stale_entries.len(), 3);
    let pruned = t.applier.prune(&t.owner, &stale_entries).await.unwrap();
    let mut got = lines(&pruned);
    got.sort();
    assert_eq!(
        got,
        [
            format!("ConfigMap/{ns}/protected skipped"),
            format!("ConfigMap/{ns}/relabelled skipped"),
            format!("ConfigMap/{ns}/stale deleted"),
        ]
    );
    assert!(t.config_map("relabelled").await.is_some());
    assert!(t.config_map("protected").await.is_some());
    assert!(t.config_map("kept").await.is_some());
    eventually("stale ConfigMap gone", Duration::from_secs(20), || async {
        t.config_map("stale").await.is_none().then_some(())
    })
    .await;
    t.delete().await;
}

#[tokio::test]
async fn deletion_policies_decide_what_finalize_deletes() {
    let t = ApplyTest::new("applier-finalize", "fin").await;
    let ns = t.namespace();
    let cs = t.apply(vec![t.configmap("a", json!({}))], "rev1").await.unwrap();
    let inventory: ResourceInventory = inventory_of(&cs);
    let finalize = |policy: DeletionPolicy, wait: bool, timeout: u64| {
        t.applier
            .finalize(&t.owner, &inventory, policy, wait, Duration::from_secs(timeout))
    };
    let none = finalize(DeletionPolicy::Orphan, true, 10).await.unwrap();
    assert!(none.is_empty());
    let none = finalize(DeletionPolicy::MirrorPrune, false, 10).await.unwrap();
    assert!(none.is_empty());
    assert!(t.config_map("a").await.is_some());
    let deleted = finalize(DeletionPolicy::WaitForTermination, false, 20)
        .await
        .unwrap();
    assert_eq!(lines(&deleted), [format!("ConfigMap/{ns}/a deleted")]);
    assert!(t.config_map("a").await.is_none());
    t.delete().await;
}

#[tokio::test]
async fn secret_values_never_show_in_diffs() {
    let t = ApplyTest::new("applier-secret", "sec").await;
    let ns = t.namespace();
    let secret = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"password": password, "user": "admin"}})
    };
    t.apply(vec![secret("hunter2")], "rev1").await.unwrap();
    let diffs = t
        .applier
        .diff(t.request(vec![secret("s3cr3t-new")], "rev2"))
        .await
        .unwrap();
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].action, Action::Configured);
    let text = &diffs[0].diff;
    assert!(
        text.contains("*** (before)") && text.contains("*** (after)"),
        "{text}"
    );
    for leaked in [
        "hunter2",
        "aHVudGVyMg==",
        "s3cr3t-new",
        "czNjcjN0LW5ldw==",
        "admin",
        "YWRtaW4=",
    ] {
        assert!(!text.contains(leaked), "{leaked} in {text}");
    }
    t.delete().await;
}

#[tokio::test]
async fn ignore_rules_keep_drift_in_ignored_fields_out() {
    let t = ApplyTest::new("applier-ignore", "ign").await;
    let ns = t.namespace();
    let desired = || vec![t.configmap("c", json!({"k": "v", "tuned": "1"}))];
    t.apply(desired(), "rev1").await.unwrap();
    t.edit_as("tuner", "c", json!({"tuned": "2"})).await;
    let rules = vec![IgnoreRule {
        paths: vec!["/data/tuned".into()],
        target: Some(Selector {
            kind: Some("ConfigMap".into()),
            name: Some("c".into()),
            ..Default::default()
        }),
    }];
    let cs = t.apply_ignoring(desired(), "rev2", &rules).await.unwrap();
    assert_eq!(lines(&cs), [format!("ConfigMap/{ns}/c unchanged")]);
    assert_eq!(t.data_of("c").await["tuned"], "2");
    t.delete().await;
}

#[tokio::test]
async fn a_bad_ignore_rule_fails_the_apply_before_anything_is_written() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-ignore-bad").await;
    let owner = Owner::new("ign", &ns.name);
    applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "c", json!({"k": "v"}))],
            "rev1",
            &[],
        ))
        .await
        .unwrap();
    // the bad rule selects no object of this apply: it fails all the same
    let rules = vec![
        IgnoreRule {
            paths: vec!["/data".into()],
            target: None,
        },
        IgnoreRule {
            paths: vec!["/data/k".into()],
            target: Some(Selector {
                kind: Some("Secret".into()),
                label_selector: Some("app in (web".into()),
                ..Default::default()
            }),
        },
    ];
    let objects = || {
        vec![
            configmap(&ns.name, "c", json!({"k": "changed"})),
            configmap(&ns.name, "d", json!({"k": "new"})),
        ]
    };
    let expected = format!(
        "Kustomization/{}/ign spec.ignore[1].target.labelSelector: invalid selector 'app in (web': \
         expected ',' or ')', found the end",
        ns.name
    );
    let err = applier
        .apply(request(&owner, objects(), "rev2", &rules))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(err.errors[0].kind, FailureKind::Invalid);
    assert_eq!(err.retry(), Retry::RetryInterval);
    let err = applier
        .diff(request(&owner, objects(), "rev2", &rules))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(
        live(&client, "v1", "ConfigMap", Some(&ns.name), "c")
            .await
            .unwrap()["data"],
        json!({"k": "v"})
    );
    assert!(
        live(&client, "v1", "ConfigMap", Some(&ns.name), "d")
            .await
            .is_none()
    );
    ns.delete().await;
}

#[tokio::test]
async fn ignore_rules_reach_into_lists_by_index() {
    // An image updater owns the image of the first container (server-side apply, its own field
    // manager). The rule `/spec/template/spec/containers/0/image` keeps that out of drift, and
    // when the Deployment is applied for another change the image is left to the updater: our
    // field manager gives it up instead of claiming it (what another Apply manager owns is
    // stripped from the payload; list indices resolve to the element's key in managedFields).
    let t = ApplyTest::new("applier-ignore-list", "ign").await;
    let ns = t.namespace();
    let web = |note: &str| {
        let mut d = deployment(ns, "web", "web");
        d["spec"]["replicas"] = 0.into();
        d["metadata"]["annotations"] = json!({"note": note});
        d["spec"]["template"]["spec"]["containers"] =
            json!([{"name": "app", "image": "nginx:1"}, {"name": "proxy", "image": "envoy:1"}]);
        vec![d]
    };
    t.apply(web("a"), "rev1").await.expect("first apply");
    let update = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
    Api::<Deployment>::namespaced(t.client.clone(), ns)
        .patch(
            "web",
            &PatchParams::apply("image-updater").force(),
            &Patch::Apply(&update),
        )
        .await
        .expect("the updater sets the image");
    let rules = vec![IgnoreRule {
        paths: vec!["/spec/template/spec/containers/0/image".into()],
        target: Some(Selector {
            kind: Some("Deployment".into()),
            ..Default::default()
        }),
    }];
    let cs = t.apply_ignoring(web("a"), "rev2", &rules).await.expect("apply");
    assert_eq!(lines(&cs), [format!("Deployment/{ns}/web unchanged")]);

    let cs = t.apply_ignoring(web("b"), "rev3", &rules).await.expect("apply");
    assert_eq!(lines(&cs), [format!("Deployment/{ns}/web configured")]);
    let obj = t.live("apps/v1", "Deployment", "web").await.unwrap();
    let containers = &obj["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "nginx:2");
    assert_eq!(containers[1]["image"], "envoy:1");
    assert_eq!(obj["metadata"]["annotations"]["note"], "b");
    let ours = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kustomize-controller" && e["operation"] == "Apply")
        .expect("our managedFields entry")
        .clone();
    let ours_containers = &ours["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"];
    assert!(
        ours_containers["k:{\"name\":\"app\"}"].get("f:image").is_none(),
        "the updater's image is not ours: {ours_containers}"
    );
    assert!(
        ours_containers["k:{\"name\":\"proxy\"}"].get("f:image").is_some(),
        "{ours_containers}"
    );
    t.delete().await;
}

#[tokio::test]
async fn objects_behind_an_unavailable_webhook_are_retried_and_only_they_fail() {
    // A same-apply dependency Flux's stages cannot order: a validating webhook whose Service has
    // no endpoints yet. The objects it guards are retried in the bounded second pass and
    // reported; everything else is applied. (The webhook only matches this test's namespace and
    // label, so it cannot disturb other tests on the shared cluster.)
    let short_waits = waits(Duration::from_secs(3), Duration::from_millis(500));
    let t = ApplyTest::with_options("applier-webhook", "hook", short_waits).await;
    let ns = t.namespace();
    let hook_name = format!("e2e-guard-{}", unique_suffix());
    let guarded = |v: &str| {
        let mut cm = t.configmap("guarded", json!({"k": v}));
        cm["metadata"]["labels"] = json!({"e2e-guarded": "yes"});
        cm
    };
    let objects = |v: &str| {
        vec![
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "guard", "namespace": ns},
                "spec": {"selector": {"app": "guard"}, "ports": [{"port": 443}]}}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": hook_name},
                "webhooks": [{"name": "guard.e2e.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "timeoutSeconds": 2,
                    "clientConfig": {"service": {"name": "guard", "namespace": ns, "port": 443}},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "objectSelector": {"matchLabels": {"e2e-guarded": "yes"}}}]}),
            guarded(v),
            t.configmap("free", json!({"k": v})),
        ]
    };
    // The guarded object exists before the webhook does and is left out of the first apply:
    // the webhook may be in effect before that apply reaches its last stage, and a test racing
    // it would be flaky.
    let api = t.config_maps();
    api.patch(
        "guarded",
        &PatchParams::apply("kustomize-controller").force(),
        &Patch::Apply(&guarded("1")),
    )
    .await
    .expect("create the guarded ConfigMap");
    let without_guarded: Vec<Value> = objects("1")
        .into_iter()
        .filter(|o| o["metadata"]["name"] != "guarded")
        .collect();
    t.apply(without_guarded, "rev1").await.expect("first apply");
    // the API server picks up webhook configurations asynchronously
    eventually("webhook in effect", Duration::from_secs(20), || async {
        let probe = guarded("probe");
        let params = PatchParams::apply("probe").force().dry_run();
        api.patch("guarded", &params, &Patch::Apply(&probe))
            .await
            .is_err()
            .then_some(())
    })
    .await;

    t.counts.reset();
    let err = t.apply(objects("2"), "rev2").await.unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("ConfigMap/{ns}/guarded"));
    assert_eq!(err.errors[0].kind, FailureKind::MissingDependency);
    assert!(err.errors[0].message.contains("failed calling webhook"), "{err}");
    assert_eq!(err.retry(), Retry::RetryInterval);
    assert!(
        lines(&err.changes).contains(&format!("ConfigMap/{ns}/free configured")),
        "{err}"
    );
    assert_eq!(t.data_of("free").await["k"], "2");
    assert_eq!(t.data_of("guarded").await["k"], "1");
    assert!(
        t.dry_runs_of("configmaps") >= 3,
        "retried in a second pass: {:?}",
        t.counts.snapshot()
    );

    delete_cluster_object(
        &t.client,
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        &hook_name,
    )
    .await;
    t.delete().await;
}

#[tokio::test]
async fn a_pod_and_the_service_account_it_runs_as_apply_in_one_go() {
    // ServiceAccount admission rejects a Pod whose ServiceAccount does not exist, dry-run
    // included; stage order cannot help (both are in the last stage), and the Pod comes first
    // in the input. The Pod is deferred and applied in the second pass.
    let t = ApplyTest::new("applier-sa", "sa").await;
    let ns = t.namespace();
    let pod = pod_running_as(ns, "builder");
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "namespace": ns}});

    // the Pod alone does not validate: without the retry this apply would fail
    let alone = Api::<Pod>::namespaced(t.client.clone(), ns)
        .patch(
            "build",
            &PatchParams::apply("probe").force().dry_run(),
            &Patch::Apply(&pod),
        )
        .await
        .expect_err("the Pod needs its ServiceAccount");
    let kube::Error::Api(status) = alone else {
        panic!("not an API error: {alone}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains(&format!(
            "error looking up service account {ns}/builder: serviceaccount \"builder\" not found"
        )),
        "{status:?}"
    );

    let cs = t
        .apply(vec![pod.clone(), sa.clone()], "rev1")
        .await
        .expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ServiceAccount/{ns}/builder created"),
            format!("Pod/{ns}/build created"),
        ]
    );
    let live_pod = t.live("v1", "Pod", "build").await.expect("pod exists");
    assert_eq!(live_pod["spec"]["serviceAccountName"], "builder");
    assert!(t.live("v1", "ServiceAccount", "builder").await.is_some());
    assert!(
        t.dry_runs_of("pods") >= 2,
        "the Pod went through a second pass: {:?}",
        t.counts.snapshot()
    );

    // what the admission plugin added (the token volume) is not drift: a full re-apply (after
    // a restart) writes nothing (the fake kubelet writes the Pod's status meanwhile, so its
    // resourceVersion is no witness)
    t.counts.reset();
    let cs = t
        .apply_restarted(vec![pod, sa], "rev2")
        .await
        .expect("second apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ServiceAccount/{ns}/builder unchanged"),
            format!("Pod/{ns}/build unchanged"),
        ]
    );
    assert_eq!(t.counts.verb("patch"), 0, "{:?}", t.counts.snapshot());
    assert_eq!(t.counts.verb("dry-run-patch"), 2, "{:?}", t.counts.snapshot());
    t.delete().await;
}

#[tokio::test]
async fn a_pod_whose_service_account_nobody_applies_fails_at_once_naming_it() {
    // Not deferred: only a ServiceAccount of the same apply (or a namespace's `default`) is
    // waited for; this one may come from elsewhere, so the error is a retryable missing
    // dependency, and nothing of the apply is written.
    let t = ApplyTest::new("applier-sa-missing", "sa").await;
    let ns = t.namespace();
    let pod = pod_running_as(ns, "nobody");
    let err = t
        .apply(vec![pod, t.configmap("c", json!({"k": "v"}))], "rev1")
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("Pod/{ns}/build"));
    assert_eq!(err.errors[0].kind, FailureKind::MissingDependency);
    assert!(
        err.errors[0]
            .message
            .contains(&format!("service account {ns}/nobody")),
        "{err}"
    );
    assert_eq!(err.retry(), Retry::RetryInterval);
    assert!(err.changes.is_empty(), "{err}");
    assert!(t.config_map("c").await.is_none());
    t.delete().await;
}

#[tokio::test]
async fn a_class_whose_crd_comes_in_the_same_apply_is_applied_in_its_own_stage() {
    // The class's first dry-run fails (its kind is not served yet). It is dry-run again once the
    // first stage is in place, in the *Class stage, before the rest: an invalid class stops the
    // apply before the last stage writes anything (a failing stage aborts the
    // stages after it), where a second pass after everything would have applied the ConfigMap first.
    let t = ApplyTest::new("applier-class", "classes").await;
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let ns = t.namespace();
    let class_name = format!("gold-{suffix}");
    let objects = |tier: Value| {
        vec![
            t.configmap("uses-gold", json!({"class": class_name})),
            widget_class(&group, &class_name, tier),
            class_crd(&group),
        ]
    };
    let err = t.apply(objects(json!("high")), "rev1").await.unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("WidgetClass/{class_name}"));
    assert!(err.errors[0].message.contains("spec.tier"), "{err}");
    assert_eq!(
        lines(&err.changes),
        [format!("CustomResourceDefinition/widgetclasses.{group} created")]
    );
    assert!(t.config_map("uses-gold").await.is_none());

    let cs = t.apply(objects(json!(1)), "rev2").await.expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("CustomResourceDefinition/widgetclasses.{group} unchanged"),
            format!("WidgetClass/{class_name} created"),
            format!("ConfigMap/{ns}/uses-gold created"),
        ]
    );
    delete_crd(&t.client, &format!("widgetclasses.{group}")).await;
    t.delete().await;
}

#[tokio::test]
async fn a_class_that_is_not_ready_holds_back_the_later_stages_until_the_wait_ends() {
    // After the *Class stage the applier waits (bounded) until what it wrote is
    // kstatus Current. A class whose controller reports Ready=False is not; nothing of the last
    // stage is applied, and the error names the class and its status.
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let short_waits = waits(Duration::from_secs(2), Duration::from_millis(250));
    let t = ApplyTest::with_options("applier-class-wait", "classes", short_waits).await;
    let ns = t.namespace();
    install_crd(&t.client, &serde_json::from_value(class_crd(&group)).unwrap()).await;
    let class_name = format!("silver-{suffix}");
    let classes = served_api(&t.client, &format!("{group}/v1"), "WidgetClass", None).await;
    // the class exists and its controller (played by the test) has not accepted it
    classes
        .patch(
            &class_name,
            &PatchParams::apply("e2e-tests"),
            &Patch::Apply(&widget_class(&group, &class_name, json!(1))),
        )
        .await
        .expect("create class");
    let set_ready = |ready: &str| {
        let status = json!({"apiVersion": format!("{group}/v1"), "kind": "WidgetClass", "metadata": {"name": class_name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test",
                "message": format!("gateway controller says {ready}"), "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let (classes, class_name) = (classes.clone(), class_name.clone());
        async move {
            classes
                .patch_status(
                    &class_name,
                    &PatchParams::apply("e2e-class-controller").force(),
                    &Patch::Apply(&status),
                )
                .await
                .expect("class status");
        }
    };
    set_ready("False").await;
    let objects = || {
        vec![
            widget_class(&group, &class_name, json!(2)),
            t.configmap("uses-silver", json!({"class": class_name})),
        ]
    };
    let err = t.apply(objects(), "rev1").await.unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("WidgetClass/{class_name}"));
    assert!(err.errors[0].message.contains("not ready after 2s"), "{err}");
    assert!(
        err.errors[0].message.contains("gateway controller says False"),
        "{err}"
    );
    assert_eq!(err.errors[0].kind, FailureKind::Api);
    assert_eq!(err.retry(), Retry::RetryInterval);
    assert_eq!(
        lines(&err.changes),
        [format!("WidgetClass/{class_name} configured")]
    );
    assert!(t.config_map("uses-silver").await.is_none());

    // once the controller accepts the class, the apply goes through
    set_ready("True").await;
    let cs = t.apply(objects(), "rev2").await.expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("WidgetClass/{class_name} unchanged"),
            format!("ConfigMap/{ns}/uses-silver created"),
        ]
    );
    delete_crd(&t.client, &format!("widgetclasses.{group}")).await;
    t.delete().await;
}

#[tokio::test]
async fn migrate_api_version_moves_every_field_manager_to_the_desired_version() {
    // Flux's MigrateAPIVersion gate (default off): before the dry-run every
    // managedFields entry of the live object is rewritten to the desired apiVersion.
    let client = crate::support::client().await;
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {"type": "object",
            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}}}}})
    };
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [version("v1beta1", false), version("v1", true)]}});
    install_crd(&client, &serde_json::from_value(crd).unwrap()).await;
    let ns = TestNamespace::new(&client, "applier-migrate").await;
    let owner = Owner::new("migrate", &ns.name);
    let old_api = served_api(&client, &format!("{group}/v1beta1"), "Gadget", Some(&ns.name)).await;
    let gadget = |name: &str, api_version: &str| {
        json!({"apiVersion": api_version, "kind": "Gadget", "metadata": {"name": name, "namespace": ns.name},
            "spec": {"size": 1}})
    };
    let entry_versions = |obj: &Value| -> Vec<(String, String)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap().to_string(),
                    e["apiVersion"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let v1 = format!("{group}/v1");
    for (name, migrate) in [("migrated", true), ("kept", false)] {
        // another tool wrote a field through the old version
        let mut old = gadget(name, &format!("{group}/v1beta1"));
        old["spec"] = json!({"color": "red"});
        old_api
            .patch(name, &PatchParams::apply("other-tool"), &Patch::Apply(&old))
            .await
            .expect("write through v1beta1");
        let options = ApplierOptions {
            migrate_api_version: migrate,
            ..Default::default()
        };
        let (applier, _counts, client) = applier_with(options).await;
        applier
            .apply(request(&owner, vec![gadget(name, &v1)], "rev1", &[]))
            .await
            .expect("apply");
        let obj = live(&client, &v1, "Gadget", Some(&ns.name), name).await.unwrap();
        let versions = entry_versions(&obj);
        let other = versions
            .iter()
            .find(|(m, _)| m == "other-tool")
            .expect("the other tool's entry stays");
        let expected = if migrate {
            v1.clone()
        } else {
            format!("{group}/v1beta1")
        };
        assert_eq!(other.1, expected, "migrate={migrate}: {versions:?}");
        assert!(
            versions
                .iter()
                .any(|(m, v)| m == "kustomize-controller" && *v == v1),
            "{versions:?}"
        );
    }
    delete_crd(&client, &format!("gadgets.{group}")).await;
    ns.delete().await;
}
