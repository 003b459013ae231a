//! Issue 5: the server-side-apply resource manager on the real control plane.
//!
//! Expected change-set lines come from Flux's format (reference 5.7); expected object states
//! from what the API server reports.
//!
//! Same-apply dependencies: a Pod whose ServiceAccount comes in the same apply (the test API
//! server runs the ServiceAccount admission plugin, so the Pod's first dry-run really fails); a
//! custom resource in a namespace, both created by the same apply as its CRD (its first dry-run
//! fails because the kind is not served and the namespace is missing; Flux relies on stages for
//! this, we validate the whole apply before writing and retry it in the second pass); and
//! objects guarded by a webhook whose Service has no endpoints (no ordering can fix it; they are
//! retried and reported alone).

use std::time::Duration;

use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kustomize_controller::api::inventory::ResourceInventory;
use kustomize_controller::api::kustomization::{DeletionPolicy, IgnoreRule, Selector};
use kustomize_controller::applier::inventory::{inventory_of, stale};
use kustomize_controller::applier::{Action, ApplyRequest, ChangeSet, FailureKind, Owner};
use kustomize_controller::kube_ext::ResourceResolver;
use serde_json::{Value, json};

use crate::support::applier::applier;
use crate::support::{TestNamespace, eventually, kustomization_crd, unique_suffix};

fn request<'a>(
    owner: &Owner,
    objects: Vec<Value>,
    revision: &'a str,
    ignore: &'a [IgnoreRule],
) -> ApplyRequest<'a> {
    ApplyRequest {
        owner: owner.clone(),
        objects,
        force: false,
        ignore,
        revision,
        digest: "sha256:test",
    }
}

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

/// The live object, or `None`.
async fn live(client: &Client, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let resolver = ResourceResolver::new(client.clone());
    let (api, _) = resolver.api(api_version, kind, Some(ns)).await.expect("resolve");
    api.get_opt(name)
        .await
        .expect("get")
        .map(|o| serde_json::to_value(o).unwrap())
}

async fn rv(client: &Client, api_version: &str, kind: &str, ns: &str, name: &str) -> String {
    let obj = live(client, api_version, kind, ns, name)
        .await
        .expect("object exists");
    obj["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

/// Writes `data` into a ConfigMap as another field manager, the way a person or tool would.
async fn edit_as(client: &Client, manager: &str, ns: &str, name: &str, data: Value) {
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
    let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data});
    api.patch(name, &PatchParams::apply(manager).force(), &Patch::Apply(&patch))
        .await
        .expect("edit");
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

async fn delete_cluster_object(client: &Client, api_version: &str, kind: &str, name: &str) {
    let resolver = ResourceResolver::new(client.clone());
    if let Ok((api, _)) = resolver.api(api_version, kind, None).await {
        let _ = api.delete(name, &DeleteParams::background()).await;
    }
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
    let widget = live(&client, &format!("{group}/v1"), "Widget", &ns, "w1")
        .await
        .expect("widget exists");
    assert_eq!(widget["spec"]["size"], 3);
    assert_eq!(
        widget["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "apps"
    );
    let widget_dry_runs = counts
        .snapshot()
        .iter()
        .filter(|(k, _)| k.verb == "dry-run-patch" && k.resource == format!("widgets.{group}"))
        .map(|(_, n)| *n)
        .sum::<u64>();
    assert!(
        widget_dry_runs >= 2,
        "the widget went through a second pass: {:?}",
        counts.snapshot()
    );

    delete_cluster_object(&client, "v1", "Namespace", &ns).await;
    delete_cluster_object(
        &client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &format!("widgets.{group}"),
    )
    .await;
}

#[tokio::test]
async fn an_identical_apply_writes_nothing_and_costs_one_list_per_kind() {
    let (applier, counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-noop").await;
    let owner = Owner::new("noop", &ns.name);
    let objects = || {
        vec![
            configmap(&ns.name, "a", json!({"k": "v"})),
            configmap(&ns.name, "b", json!({"k": "v"})),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns.name},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns.name}, "stringData": {"p": "hunter2"}}),
            deployment(&ns.name, "web", "web"),
        ]
    };
    let first = applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .expect("first apply");
    assert_eq!(first.with_action(Action::Created).count(), 5, "{first}");
    let before = [
        rv(&client, "v1", "ConfigMap", &ns.name, "a").await,
        rv(&client, "v1", "Service", &ns.name, "web").await,
        rv(&client, "v1", "Secret", &ns.name, "s").await,
    ];

    // the Deployment's controller writes it (revision annotation, status); wait until it is done
    let deployments =
        kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns.name);
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
    counts.reset();
    let second = applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .expect("second apply");
    assert_eq!(second.with_action(Action::Unchanged).count(), 5, "{second}");
    assert_eq!(counts.verb("patch"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert!(counts.verb("dry-run-patch") <= 1, "{:?}", counts.snapshot());

    // a quiet no-op: one metadata LIST per kind and nothing else
    counts.reset();
    let quiet = applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .expect("quiet apply");
    assert_eq!(quiet.with_action(Action::Unchanged).count(), 5, "{quiet}");
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    assert_eq!(counts.total(), 4, "{:?}", counts.snapshot());

    // a new revision with the same objects: a full dry-run, still no write
    counts.reset();
    let third = applier
        .apply(request(&owner, objects(), "rev2", &[]))
        .await
        .expect("third apply");
    assert_eq!(third.with_action(Action::Unchanged).count(), 5, "{third}");
    assert_eq!(counts.verb("patch"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("dry-run-patch"), 5, "{:?}", counts.snapshot());
    // live objects come from one LIST per kind, not a GET each
    assert_eq!(counts.verb("get"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("list"), 4, "{:?}", counts.snapshot());
    let after = [
        rv(&client, "v1", "ConfigMap", &ns.name, "a").await,
        rv(&client, "v1", "Service", &ns.name, "web").await,
        rv(&client, "v1", "Secret", &ns.name, "s").await,
    ];
    assert_eq!(before, after);
    ns.delete().await;
}

#[tokio::test]
async fn out_of_band_edits_and_deletions_are_corrected_even_on_the_fast_path() {
    let (applier, counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-drift").await;
    let owner = Owner::new("drift", &ns.name);
    let objects = || {
        vec![
            configmap(&ns.name, "edited", json!({"k": "v"})),
            configmap(&ns.name, "deleted", json!({"k": "v"})),
            configmap(&ns.name, "quiet", json!({"k": "v"})),
        ]
    };
    applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .expect("first apply");

    edit_as(
        &client,
        "someone-else",
        &ns.name,
        "edited",
        json!({"k": "changed"}),
    )
    .await;
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns.name);
    api.delete("deleted", &DeleteParams::default())
        .await
        .expect("delete");

    counts.reset();
    let cs = applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .expect("second apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ConfigMap/{}/deleted created", ns.name),
            format!("ConfigMap/{}/edited configured", ns.name),
            format!("ConfigMap/{}/quiet unchanged", ns.name),
        ]
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "edited")
            .await
            .unwrap()["data"]["k"],
        "v"
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "deleted")
            .await
            .is_some()
    );
    // only the two changed objects were dry-run
    assert_eq!(counts.verb("dry-run-patch"), 2, "{:?}", counts.snapshot());
    ns.delete().await;
}

#[tokio::test]
async fn per_object_annotations_are_honoured() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-annotations").await;
    let owner = Owner::new("ann", &ns.name);
    let annotated = |name: &str, key: &str, value: &str, data: Value| {
        let mut cm = configmap(&ns.name, name, data);
        cm["metadata"]["annotations"] = json!({key: value});
        cm
    };
    const SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
    // `kubectl` created `merged` and `overridden` with an extra key before Flux took them over
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns.name);
    for name in ["merged", "overridden"] {
        let cm =
            serde_json::from_value(configmap(&ns.name, name, json!({"k": "v", "extra": "kubectl"}))).unwrap();
        api.create(
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
    let cs = applier
        .apply(request(&owner, objects("1"), "rev1", &[]))
        .await
        .expect("apply");
    assert_eq!(
        cs.action_of(&kustomize_controller::api::inventory::ObjectRef::new(
            "",
            "ConfigMap",
            &ns.name,
            "ignored"
        )),
        Some(Action::Skipped)
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "ignored")
            .await
            .is_none(),
        "ssa: Ignore is never applied"
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "disabled")
            .await
            .is_none(),
        "reconcile: disabled is never applied"
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "once").await.unwrap()["data"],
        json!({"k": "1"})
    );
    // Merge keeps kubectl's field; Override takes kubectl's fields over and drops what is not in the manifest
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "merged")
            .await
            .unwrap()["data"],
        json!({"k": "1", "extra": "kubectl"})
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "overridden")
            .await
            .unwrap()["data"],
        json!({"k": "1"})
    );

    // IfNotPresent: created once, never patched again
    let cs = applier
        .apply(request(&owner, objects("2"), "rev2", &[]))
        .await
        .expect("apply");
    assert!(
        lines(&cs).contains(&format!("ConfigMap/{}/once skipped", ns.name)),
        "{cs}"
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "once").await.unwrap()["data"],
        json!({"k": "1"})
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "overridden")
            .await
            .unwrap()["data"],
        json!({"k": "2"})
    );

    // reconcile: disabled on the live object protects it from changes
    edit_as(
        &client,
        "someone",
        &ns.name,
        "overridden",
        json!({"k": "hands-off"}),
    )
    .await;
    let protect = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}});
    api.patch("overridden", &PatchParams::default(), &Patch::Merge(&protect))
        .await
        .unwrap();
    let cs = applier
        .apply(request(&owner, objects("2"), "rev3", &[]))
        .await
        .expect("apply");
    assert!(
        lines(&cs).contains(&format!("ConfigMap/{}/overridden skipped", ns.name)),
        "{cs}"
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "overridden")
            .await
            .unwrap()["data"]["k"],
        "hands-off"
    );
    ns.delete().await;
}

#[tokio::test]
async fn immutable_field_changes_fail_without_force_and_recreate_with_it() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-immutable").await;
    let owner = Owner::new("imm", &ns.name);
    applier
        .apply(request(
            &owner,
            vec![deployment(&ns.name, "web", "v1")],
            "rev1",
            &[],
        ))
        .await
        .expect("first apply");
    let uid = live(&client, "apps/v1", "Deployment", &ns.name, "web")
        .await
        .unwrap()["metadata"]["uid"]
        .clone();

    // the selector of a Deployment is immutable
    let err = applier
        .apply(request(
            &owner,
            vec![deployment(&ns.name, "web", "v2")],
            "rev2",
            &[],
        ))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "Deployment/{}/web immutable field detected (spec.selector)",
            ns.name
        )),
        "{message}"
    );
    assert!(!err.is_transient());
    assert_eq!(
        live(&client, "apps/v1", "Deployment", &ns.name, "web")
            .await
            .unwrap()["metadata"]["uid"],
        uid
    );

    // force with a change that is also invalid: the object is kept (Flux would delete it)
    let mut invalid = deployment(&ns.name, "web", "v2");
    invalid["spec"]["replicas"] = json!(-1);
    let mut req = request(&owner, vec![invalid], "rev3", &[]);
    req.force = true;
    let err = applier.apply(req).await.unwrap_err();
    assert!(err.to_string().contains("spec.replicas"), "{err}");
    assert_eq!(
        live(&client, "apps/v1", "Deployment", &ns.name, "web")
            .await
            .unwrap()["metadata"]["uid"],
        uid
    );

    // the force annotation recreates it
    let mut forced = deployment(&ns.name, "web", "v2");
    forced["metadata"]["annotations"] = json!({"kustomize.toolkit.fluxcd.io/force": "enabled"});
    let cs = applier
        .apply(request(&owner, vec![forced], "rev4", &[]))
        .await
        .expect("forced apply");
    assert_eq!(lines(&cs), [format!("Deployment/{}/web created", ns.name)]);
    let recreated = live(&client, "apps/v1", "Deployment", &ns.name, "web")
        .await
        .unwrap();
    assert_ne!(recreated["metadata"]["uid"], uid);
    assert_eq!(recreated["spec"]["selector"]["matchLabels"]["app"], "v2");
    ns.delete().await;
}

#[tokio::test]
async fn invalid_objects_are_named_and_nothing_else_changes() {
    let (applier, counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-invalid").await;
    let owner = Owner::new("bad", &ns.name);
    let objects = vec![
        configmap(&ns.name, "good", json!({"k": "v"})),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-port", "namespace": ns.name},
            "spec": {"ports": [{"port": 70000}]}}),
    ];
    counts.reset();
    let err = applier
        .apply(request(&owner, objects, "rev1", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("Service/{}/bad-port", ns.name));
    assert_eq!(err.errors[0].kind, FailureKind::Invalid);
    assert!(
        err.errors[0].message.starts_with("dry-run failed (Invalid): "),
        "{err}"
    );
    assert!(err.errors[0].message.contains("spec.ports[0].port"), "{err}");
    assert_eq!(counts.verb("patch"), 0);
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "good").await.is_none());

    // a namespaced object without namespace is an error, never defaulted
    let no_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "floating"}});
    let err = applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "good", json!({})), no_ns],
            "rev2",
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ConfigMap/floating namespace not specified: ConfigMap is namespaced and metadata.namespace is empty"
    );
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "good").await.is_none());
    ns.delete().await;
}

#[tokio::test]
async fn two_kustomizations_claiming_one_object_is_a_clear_conflict() {
    let (applier, _counts, client) = applier().await;
    kustomization_crd(&client).await;
    let ns = TestNamespace::new(&client, "applier-conflict").await;
    let first = Owner::new("first", &ns.name);
    let second = Owner::new("second", &ns.name);
    let cs = applier
        .apply(request(
            &first,
            vec![configmap(&ns.name, "shared", json!({"k": "1"}))],
            "r",
            &[],
        ))
        .await
        .unwrap();
    // the first Kustomization records the object in its inventory
    let ks = kustomize_controller::kube_ext::ResourceResolver::new(client.clone());
    let (api, _) = ks
        .api("kustomize.toolkit.fluxcd.io/v1", "Kustomization", Some(&ns.name))
        .await
        .unwrap();
    let obj = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "first", "namespace": ns.name},
        "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}}});
    api.create(&PostParams::default(), &serde_json::from_value(obj).unwrap())
        .await
        .unwrap();
    let status = json!({"status": {"inventory": inventory_of(&cs)}});
    api.patch_status("first", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();

    let err = applier
        .apply(request(
            &second,
            vec![configmap(&ns.name, "shared", json!({"k": "2"}))],
            "r",
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "ConfigMap/{ns}/shared is already managed by Kustomization {ns}/first: the object is in both Kustomizations; \
             remove it from one of them",
            ns = ns.name
        )
    );
    let cm = live(&client, "v1", "ConfigMap", &ns.name, "shared")
        .await
        .unwrap();
    assert_eq!(cm["data"]["k"], "1");
    assert_eq!(
        cm["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "first"
    );

    // once the first no longer lists it, the second takes it over (a move between Kustomizations)
    let status = json!({"status": {"inventory": {"entries": []}}});
    api.patch_status("first", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    applier
        .apply(request(
            &second,
            vec![configmap(&ns.name, "shared", json!({"k": "2"}))],
            "r",
            &[],
        ))
        .await
        .unwrap();
    let cm = live(&client, "v1", "ConfigMap", &ns.name, "shared")
        .await
        .unwrap();
    assert_eq!(
        cm["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"],
        "second"
    );
    ns.delete().await;
}

#[tokio::test]
async fn prune_deletes_only_what_is_still_ours() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-prune").await;
    let owner = Owner::new("pruner", &ns.name);
    let all = vec![
        configmap(&ns.name, "kept", json!({})),
        configmap(&ns.name, "stale", json!({})),
        configmap(&ns.name, "relabelled", json!({})),
        configmap(&ns.name, "protected", json!({})),
    ];
    let first = applier.apply(request(&owner, all, "rev1", &[])).await.unwrap();
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns.name);
    let relabel = json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/name": "someone-else"}}});
    api.patch("relabelled", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let protect = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/prune": "disabled"}}});
    api.patch("protected", &PatchParams::default(), &Patch::Merge(&protect))
        .await
        .unwrap();

    let second = applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "kept", json!({}))],
            "rev2",
            &[],
        ))
        .await
        .unwrap();
    let stale_entries = stale(&inventory_of(&first), &inventory_of(&second));
    assert_eq!(stale_entries.len(), 3);
    let pruned = applier.prune(&owner, &stale_entries).await.unwrap();
    let mut got = lines(&pruned);
    got.sort();
    assert_eq!(
        got,
        [
            format!("ConfigMap/{}/protected skipped", ns.name),
            format!("ConfigMap/{}/relabelled skipped", ns.name),
            format!("ConfigMap/{}/stale deleted", ns.name),
        ]
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "relabelled")
            .await
            .is_some()
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "protected")
            .await
            .is_some()
    );
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "kept").await.is_some());
    eventually("stale ConfigMap gone", Duration::from_secs(20), || async {
        live(&client, "v1", "ConfigMap", &ns.name, "stale")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn deletion_policies_decide_what_finalize_deletes() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-finalize").await;
    let owner = Owner::new("fin", &ns.name);
    let cs = applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "a", json!({}))],
            "rev1",
            &[],
        ))
        .await
        .unwrap();
    let inventory: ResourceInventory = inventory_of(&cs);
    let none = applier
        .finalize(
            &owner,
            &inventory,
            DeletionPolicy::Orphan,
            true,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    let none = applier
        .finalize(
            &owner,
            &inventory,
            DeletionPolicy::MirrorPrune,
            false,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "a").await.is_some());
    let deleted = applier
        .finalize(
            &owner,
            &inventory,
            DeletionPolicy::WaitForTermination,
            false,
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert_eq!(lines(&deleted), [format!("ConfigMap/{}/a deleted", ns.name)]);
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "a").await.is_none());
    ns.delete().await;
}

#[tokio::test]
async fn secret_values_never_show_in_diffs() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-secret").await;
    let owner = Owner::new("sec", &ns.name);
    let secret = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns.name},
            "stringData": {"password": password, "user": "admin"}})
    };
    applier
        .apply(request(&owner, vec![secret("hunter2")], "rev1", &[]))
        .await
        .unwrap();
    let diffs = applier
        .diff(request(&owner, vec![secret("s3cr3t-new")], "rev2", &[]))
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
    ns.delete().await;
}

#[tokio::test]
async fn ignore_rules_keep_drift_in_ignored_fields_out() {
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-ignore").await;
    let owner = Owner::new("ign", &ns.name);
    applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "c", json!({"k": "v", "tuned": "1"}))],
            "rev1",
            &[],
        ))
        .await
        .unwrap();
    edit_as(&client, "tuner", &ns.name, "c", json!({"tuned": "2"})).await;
    let rules = vec![IgnoreRule {
        paths: vec!["/data/tuned".into()],
        target: Some(Selector {
            kind: Some("ConfigMap".into()),
            name: Some("c".into()),
            ..Default::default()
        }),
    }];
    let cs = applier
        .apply(request(
            &owner,
            vec![configmap(&ns.name, "c", json!({"k": "v", "tuned": "1"}))],
            "rev2",
            &rules,
        ))
        .await
        .unwrap();
    assert_eq!(lines(&cs), [format!("ConfigMap/{}/c unchanged", ns.name)]);
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "c").await.unwrap()["data"]["tuned"],
        "2"
    );
    ns.delete().await;
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
    assert!(!err.is_transient());
    let err = applier
        .diff(request(&owner, objects(), "rev2", &rules))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "c").await.unwrap()["data"],
        json!({"k": "v"})
    );
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "d").await.is_none());
    ns.delete().await;
}

#[tokio::test]
async fn ignore_rules_reach_into_lists_by_index() {
    // An image updater owns the image of the first container (server-side apply, its own field
    // manager). The rule `/spec/template/spec/containers/0/image` keeps that out of drift, and
    // when the Deployment is applied for another change the image is left to the updater: our
    // field manager gives it up instead of claiming it (reference 5.5: strip what another Apply
    // manager owns; list indices resolve to the element's key in managedFields).
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-ignore-list").await;
    let owner = Owner::new("ign", &ns.name);
    let web = |note: &str| {
        let mut d = deployment(&ns.name, "web", "web");
        d["spec"]["replicas"] = 0.into();
        d["metadata"]["annotations"] = json!({"note": note});
        d["spec"]["template"]["spec"]["containers"] =
            json!([{"name": "app", "image": "nginx:1"}, {"name": "proxy", "image": "envoy:1"}]);
        d
    };
    applier
        .apply(request(&owner, vec![web("a")], "rev1", &[]))
        .await
        .expect("first apply");
    let deployments =
        kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns.name);
    let update = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}});
    deployments
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
    let cs = applier
        .apply(request(&owner, vec![web("a")], "rev2", &rules))
        .await
        .expect("apply");
    assert_eq!(lines(&cs), [format!("Deployment/{}/web unchanged", ns.name)]);

    let cs = applier
        .apply(request(&owner, vec![web("b")], "rev3", &rules))
        .await
        .expect("apply");
    assert_eq!(lines(&cs), [format!("Deployment/{}/web configured", ns.name)]);
    let obj = live(&client, "apps/v1", "Deployment", &ns.name, "web")
        .await
        .unwrap();
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
    ns.delete().await;
}

#[tokio::test]
async fn objects_behind_an_unavailable_webhook_are_retried_and_only_they_fail() {
    // A same-apply dependency Flux's stages cannot order: a validating webhook whose Service has
    // no endpoints yet. The objects it guards are retried in the bounded second pass and
    // reported; everything else is applied. (The webhook only matches this test's namespace and
    // label, so it cannot disturb other tests on the shared cluster.)
    let (client, counts) = crate::support::applier::counted_client().await;
    let options = kustomize_controller::applier::ApplierOptions {
        wait_timeout: Duration::from_secs(3),
        retry_interval: Duration::from_millis(500),
        ..Default::default()
    };
    let applier = kustomize_controller::applier::Applier::new(ResourceResolver::new(client.clone()), options);
    let ns = TestNamespace::new(&client, "applier-webhook").await;
    let owner = Owner::new("hook", &ns.name);
    let hook_name = format!("e2e-guard-{}", unique_suffix());
    let guarded = |v: &str| {
        let mut cm = configmap(&ns.name, "guarded", json!({"k": v}));
        cm["metadata"]["labels"] = json!({"e2e-guarded": "yes"});
        cm
    };
    let objects = |v: &str| {
        vec![
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "guard", "namespace": ns.name},
                "spec": {"selector": {"app": "guard"}, "ports": [{"port": 443}]}}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": hook_name},
                "webhooks": [{"name": "guard.e2e.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "timeoutSeconds": 2,
                    "clientConfig": {"service": {"name": "guard", "namespace": ns.name, "port": 443}},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                    "objectSelector": {"matchLabels": {"e2e-guarded": "yes"}}}]}),
            guarded(v),
            configmap(&ns.name, "free", json!({"k": v})),
        ]
    };
    // The guarded object exists before the webhook does and is left out of the first apply:
    // the webhook may be in effect before that apply reaches its last stage, and a test racing
    // it would be flaky.
    let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns.name);
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
    applier
        .apply(request(&owner, without_guarded, "rev1", &[]))
        .await
        .expect("first apply");
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

    counts.reset();
    let err = applier
        .apply(request(&owner, objects("2"), "rev2", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("ConfigMap/{}/guarded", ns.name));
    assert_eq!(err.errors[0].kind, FailureKind::MissingDependency);
    assert!(err.errors[0].message.contains("failed calling webhook"), "{err}");
    assert!(err.is_transient());
    assert!(
        lines(&err.changes).contains(&format!("ConfigMap/{}/free configured", ns.name)),
        "{err}"
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "free").await.unwrap()["data"]["k"],
        "2"
    );
    assert_eq!(
        live(&client, "v1", "ConfigMap", &ns.name, "guarded")
            .await
            .unwrap()["data"]["k"],
        "1"
    );
    let guarded_dry_runs = counts
        .snapshot()
        .iter()
        .filter(|(k, _)| k.verb == "dry-run-patch" && k.resource == "configmaps")
        .map(|(_, n)| *n)
        .sum::<u64>();
    assert!(
        guarded_dry_runs >= 3,
        "retried in a second pass: {:?}",
        counts.snapshot()
    );

    delete_cluster_object(
        &client,
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        &hook_name,
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn a_pod_and_the_service_account_it_runs_as_apply_in_one_go() {
    // ServiceAccount admission rejects a Pod whose ServiceAccount does not exist, dry-run
    // included; stage order cannot help (both are in the last stage), and the Pod comes first
    // in the input. The Pod is deferred and applied in the second pass.
    let (applier, counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-sa").await;
    let owner = Owner::new("sa", &ns.name);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "build", "namespace": ns.name},
        "spec": {"serviceAccountName": "builder", "containers": [{"name": "app", "image": "nginx:1"}]}});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder", "namespace": ns.name}});

    // the Pod alone does not validate: without the retry this apply would fail
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns.name);
    let alone = pods
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
            "error looking up service account {}/builder: serviceaccount \"builder\" not found",
            ns.name
        )),
        "{status:?}"
    );

    let cs = applier
        .apply(request(&owner, vec![pod.clone(), sa.clone()], "rev1", &[]))
        .await
        .expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ServiceAccount/{}/builder created", ns.name),
            format!("Pod/{}/build created", ns.name),
        ]
    );
    let live_pod = live(&client, "v1", "Pod", &ns.name, "build")
        .await
        .expect("pod exists");
    assert_eq!(live_pod["spec"]["serviceAccountName"], "builder");
    assert!(
        live(&client, "v1", "ServiceAccount", &ns.name, "builder")
            .await
            .is_some()
    );
    let pod_dry_runs = counts
        .snapshot()
        .iter()
        .filter(|(k, _)| k.verb == "dry-run-patch" && k.resource == "pods")
        .map(|(_, n)| *n)
        .sum::<u64>();
    assert!(
        pod_dry_runs >= 2,
        "the Pod went through a second pass: {:?}",
        counts.snapshot()
    );

    // what the admission plugin added (the token volume) is not drift: a full re-apply (new
    // revision) writes nothing (the fake kubelet writes the Pod's status meanwhile, so its
    // resourceVersion is no witness)
    counts.reset();
    let cs = applier
        .apply(request(&owner, vec![pod, sa], "rev2", &[]))
        .await
        .expect("second apply");
    assert_eq!(
        lines(&cs),
        [
            format!("ServiceAccount/{}/builder unchanged", ns.name),
            format!("Pod/{}/build unchanged", ns.name),
        ]
    );
    assert_eq!(counts.verb("patch"), 0, "{:?}", counts.snapshot());
    assert_eq!(counts.verb("dry-run-patch"), 2, "{:?}", counts.snapshot());
    ns.delete().await;
}

#[tokio::test]
async fn a_pod_whose_service_account_nobody_applies_fails_at_once_naming_it() {
    // Not deferred: only a ServiceAccount of the same apply (or a namespace's `default`) is
    // waited for; this one may come from elsewhere, so the error is a retryable missing
    // dependency, and nothing of the apply is written.
    let (applier, _counts, client) = applier().await;
    let ns = TestNamespace::new(&client, "applier-sa-missing").await;
    let owner = Owner::new("sa", &ns.name);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "build", "namespace": ns.name},
        "spec": {"serviceAccountName": "nobody", "containers": [{"name": "app", "image": "nginx:1"}]}});
    let err = applier
        .apply(request(
            &owner,
            vec![pod, configmap(&ns.name, "c", json!({"k": "v"}))],
            "rev1",
            &[],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("Pod/{}/build", ns.name));
    assert_eq!(err.errors[0].kind, FailureKind::MissingDependency);
    assert!(
        err.errors[0]
            .message
            .contains(&format!("service account {}/nobody", ns.name)),
        "{err}"
    );
    assert!(err.is_transient());
    assert!(err.changes.is_empty(), "{err}");
    assert!(live(&client, "v1", "ConfigMap", &ns.name, "c").await.is_none());
    ns.delete().await;
}

#[tokio::test]
async fn a_class_whose_crd_comes_in_the_same_apply_is_applied_in_its_own_stage() {
    // The class's first dry-run fails (its kind is not served yet). It is dry-run again once the
    // first stage is in place, in the *Class stage, before the rest: an invalid class stops the
    // apply before the last stage writes anything (reference 5.3: a failing stage aborts the
    // rest), where a second pass after everything would have applied the ConfigMap first.
    let (applier, _counts, client) = applier().await;
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let ns = TestNamespace::new(&client, "applier-class").await;
    let owner = Owner::new("classes", &ns.name);
    let class_name = format!("gold-{suffix}");
    let objects = |tier: Value| {
        vec![
            configmap(&ns.name, "uses-gold", json!({"class": class_name})),
            widget_class(&group, &class_name, tier),
            class_crd(&group),
        ]
    };
    let err = applier
        .apply(request(&owner, objects(json!("high")), "rev1", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("WidgetClass/{class_name}"));
    assert!(err.errors[0].message.contains("spec.tier"), "{err}");
    assert_eq!(
        lines(&err.changes),
        [format!("CustomResourceDefinition/widgetclasses.{group} created")]
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "uses-gold")
            .await
            .is_none()
    );

    let cs = applier
        .apply(request(&owner, objects(json!(1)), "rev2", &[]))
        .await
        .expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("CustomResourceDefinition/widgetclasses.{group} unchanged"),
            format!("WidgetClass/{class_name} created"),
            format!("ConfigMap/{}/uses-gold created", ns.name),
        ]
    );
    delete_cluster_object(
        &client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &format!("widgetclasses.{group}"),
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn a_class_that_is_not_ready_holds_back_the_later_stages_until_the_wait_ends() {
    // Reference 5.3: after the *Class stage the applier waits (bounded) until what it wrote is
    // kstatus Current. A class whose controller reports Ready=False is not; nothing of the last
    // stage is applied, and the error names the class and its status.
    let (client, _counts) = crate::support::applier::counted_client().await;
    let applier = kustomize_controller::applier::Applier::new(
        ResourceResolver::new(client.clone()),
        kustomize_controller::applier::ApplierOptions {
            wait_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_millis(250),
            ..Default::default()
        },
    );
    let suffix = unique_suffix();
    let group = format!("e2e{suffix}.example.com");
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(class_crd(&group)).unwrap();
    crate::support::install_crd(&client, &crd).await;
    let ns = TestNamespace::new(&client, "applier-class-wait").await;
    let owner = Owner::new("classes", &ns.name);
    let class_name = format!("silver-{suffix}");
    let resolver = ResourceResolver::new(client.clone());
    let (classes, _) = resolver
        .api(&format!("{group}/v1"), "WidgetClass", None)
        .await
        .expect("resolve WidgetClass");
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
        json!({"apiVersion": format!("{group}/v1"), "kind": "WidgetClass", "metadata": {"name": class_name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test",
                "message": format!("gateway controller says {ready}"), "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    classes
        .patch_status(
            &class_name,
            &PatchParams::apply("e2e-class-controller").force(),
            &Patch::Apply(&set_ready("False")),
        )
        .await
        .expect("class status");
    let objects = || {
        vec![
            widget_class(&group, &class_name, json!(2)),
            configmap(&ns.name, "uses-silver", json!({"class": class_name})),
        ]
    };
    let err = applier
        .apply(request(&owner, objects(), "rev1", &[]))
        .await
        .unwrap_err();
    assert_eq!(err.errors.len(), 1, "{err}");
    assert_eq!(err.errors[0].subject, format!("WidgetClass/{class_name}"));
    assert!(err.errors[0].message.contains("not ready after 2s"), "{err}");
    assert!(
        err.errors[0].message.contains("gateway controller says False"),
        "{err}"
    );
    assert!(err.is_transient());
    assert_eq!(
        lines(&err.changes),
        [format!("WidgetClass/{class_name} configured")]
    );
    assert!(
        live(&client, "v1", "ConfigMap", &ns.name, "uses-silver")
            .await
            .is_none()
    );

    // once the controller accepts the class, the apply goes through
    classes
        .patch_status(
            &class_name,
            &PatchParams::apply("e2e-class-controller").force(),
            &Patch::Apply(&set_ready("True")),
        )
        .await
        .expect("class status");
    let cs = applier
        .apply(request(&owner, objects(), "rev2", &[]))
        .await
        .expect("apply");
    assert_eq!(
        lines(&cs),
        [
            format!("WidgetClass/{class_name} unchanged"),
            format!("ConfigMap/{}/uses-silver created", ns.name),
        ]
    );
    delete_cluster_object(
        &client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &format!("widgetclasses.{group}"),
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn migrate_api_version_moves_every_field_manager_to_the_desired_version() {
    // Flux's MigrateAPIVersion gate (reference 5.4 step 4, default off): before the dry-run every
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
    crate::support::install_crd(&client, &serde_json::from_value(crd).unwrap()).await;
    let ns = TestNamespace::new(&client, "applier-migrate").await;
    let owner = Owner::new("migrate", &ns.name);
    let resolver = ResourceResolver::new(client.clone());
    let (old_api, _) = resolver
        .api(&format!("{group}/v1beta1"), "Gadget", Some(&ns.name))
        .await
        .expect("resolve Gadget v1beta1");
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
        let (client, _counts) = crate::support::applier::counted_client().await;
        let applier = kustomize_controller::applier::Applier::new(
            ResourceResolver::new(client.clone()),
            kustomize_controller::applier::ApplierOptions {
                migrate_api_version: migrate,
                ..Default::default()
            },
        );
        applier
            .apply(request(&owner, vec![gadget(name, &v1)], "rev1", &[]))
            .await
            .expect("apply");
        let obj = live(&client, &v1, "Gadget", &ns.name, name).await.unwrap();
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
    delete_cluster_object(
        &client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &format!("gadgets.{group}"),
    )
    .await;
    ns.delete().await;
}
