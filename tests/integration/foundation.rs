//! The CRD on a real API server, and a control plane that really rolls out workloads.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kustomize_controller::api::Kustomization;
use serde_json::{Value, json};

use crate::support::{TestNamespace, client, eventually, kustomization_crd};
use test_support::kubectl;

fn ks_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
    ))
}

fn minimal_spec() -> Value {
    json!({"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}})
}

#[tokio::test]
async fn crd_is_established_and_kubectl_shows_the_printer_columns() {
    let client = client().await;
    kustomization_crd(&client).await;
    let ns = TestNamespace::new(&client, "crd").await;
    let ks: Kustomization = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": ns.name}, "spec": minimal_spec()
    }))
    .unwrap();
    Api::<Kustomization>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &ks)
        .await
        .unwrap();

    let out = kubectl(&["get", "ks", "-n", &ns.name], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl get ks failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "AGE", "READY", "STATUS"]);
    assert!(
        stdout.lines().nth(1).unwrap_or_default().starts_with("apps "),
        "{stdout}"
    );

    // The status default makes a fresh object look unobserved to kstatus.
    let created = Api::<Kustomization>::namespaced(client.clone(), &ns.name)
        .get_status("apps")
        .await
        .unwrap();
    assert_eq!(created.status.expect("defaulted status").observed_generation, -1);
    ns.delete().await;
}

#[tokio::test]
async fn a_kustomization_with_every_field_round_trips() {
    let client = client().await;
    kustomization_crd(&client).await;
    let ns = TestNamespace::new(&client, "roundtrip").await;
    let spec = json!({
        "commonMetadata": {"annotations": {"team": "a"}, "labels": {"env": "prod"}},
        "dependsOn": [{"name": "infra", "namespace": "flux-system", "readyExpr": "dep.status.conditions.all(c, c.status == 'True')"}],
        "decryption": {"provider": "sops", "secretRef": {"name": "sops-keys"}, "serviceAccountName": "sops"},
        "interval": "10m",
        "retryInterval": "1m30s",
        "kubeConfig": {"secretRef": {"name": "remote", "key": "value.yaml"}},
        "path": "./deploy/prod",
        "postBuild": {
            "substitute": {"cluster": "prod"},
            "substituteFrom": [{"kind": "ConfigMap", "name": "vars"}, {"kind": "Secret", "name": "secret-vars", "optional": true}],
            "substituteStrategy": "Always"
        },
        "prune": true,
        "deletionPolicy": "WaitForTermination",
        "healthChecks": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "apps"}],
        "namePrefix": "p-",
        "nameSuffix": "-s",
        "patches": [{"patch": "- op: add\n  path: /metadata/labels/x\n  value: y\n", "target": {
            "group": "apps", "version": "v1", "kind": "Deployment", "name": "web.*", "namespace": "apps",
            "annotationSelector": "a=b", "labelSelector": "c=d"}}],
        "images": [{"name": "nginx", "newName": "registry/nginx", "newTag": "1.27", "digest": "sha256:0123"}],
        "serviceAccountName": "deployer",
        "sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository", "name": "app", "namespace": "flux-system"},
        "suspend": true,
        "targetNamespace": "apps",
        "timeout": "2m",
        "force": true,
        "wait": true,
        "components": ["../components/monitoring"],
        "ignoreMissingComponents": true,
        "healthCheckExprs": [{"apiVersion": "example.com/v1", "kind": "Widget", "current": "status.ready", "inProgress": "!status.ready", "failed": "status.failed"}],
        "buildMetadata": ["originAnnotations", "transformerAnnotations"],
        "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}]
    });
    let sent: Kustomization = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "everything", "namespace": ns.name}, "spec": spec
    }))
    .unwrap();
    // Every field deserialized into our types and serializes back to the same document.
    assert_eq!(serde_json::to_value(&sent.spec).unwrap(), spec);

    let api = Api::<Kustomization>::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &sent).await.unwrap();
    let stored = api.get("everything").await.unwrap();
    assert_eq!(stored.spec, sent.spec);
    assert_eq!(
        serde_json::to_value(&stored.spec).unwrap(),
        spec,
        "the API server changed or dropped a field"
    );
    ns.delete().await;
}

#[tokio::test]
async fn invalid_kustomizations_are_rejected_with_the_schema_message() {
    let client = client().await;
    kustomization_crd(&client).await;
    let ns = TestNamespace::new(&client, "invalid").await;
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &ks_resource());
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut spec = minimal_spec();
        edit(&mut spec);
        spec
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "bad-interval",
            with(&|s| s["interval"] = json!("10x")),
            "spec.interval in body should match",
        ),
        (
            "no-source",
            with(&|s| {
                s.as_object_mut().unwrap().remove("sourceRef");
            }),
            "spec.sourceRef: Required value",
        ),
        (
            "no-prune",
            with(&|s| {
                s.as_object_mut().unwrap().remove("prune");
            }),
            "spec.prune: Required value",
        ),
        (
            "two-kubeconfigs",
            with(&|s| s["kubeConfig"] = json!({"configMapRef": {"name": "a"}, "secretRef": {"name": "b"}})),
            "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified",
        ),
        (
            "helm-source",
            with(&|s| s["sourceRef"]["kind"] = json!("HelmRepository")),
            "spec.sourceRef.kind: Unsupported value: \"HelmRepository\"",
        ),
        (
            "long-namespace",
            with(&|s| s["targetNamespace"] = json!("n".repeat(64))),
            "spec.targetNamespace: Too long",
        ),
    ];
    for (name, spec, expected) in cases {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns.name}, "spec": spec
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &obj)
            .await
            .expect_err(&format!("{name} must be rejected"));
        let message = err.to_string();
        assert!(
            message.contains(expected),
            "{name}: expected {expected:?} in {message:?}"
        );
    }
    ns.delete().await;
}

fn deployment(name: &str, behavior: Option<&str>) -> Deployment {
    let annotations = behavior
        .map(|b| json!({"fake-kubelet.e2e/behavior": b}))
        .unwrap_or(json!({}));
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 10,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}
            }
        }
    }))
    .unwrap()
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    let c = d
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_deployment_becomes_available_through_controller_manager_and_the_fake_kubelet() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "rollout").await;
    let api = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &deployment("web", None))
        .await
        .unwrap();
    let available = eventually("web to become Available", Duration::from_secs(60), || async {
        let d = api.get("web").await.ok()?;
        (condition(&d, "Available")?.0 == "True" && d.status.as_ref()?.available_replicas == Some(2))
            .then_some(d)
    })
    .await;
    assert_eq!(available.status.unwrap().ready_replicas, Some(2));
    ns.delete().await;
}

#[tokio::test]
async fn a_deployment_whose_pods_fail_reports_the_failure() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "crashing").await;
    let api = Api::<Deployment>::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &deployment("crash", Some("fail")))
        .await
        .unwrap();
    let progressing = eventually(
        "the rollout to exceed its deadline",
        Duration::from_secs(90),
        || async {
            let d = api.get("crash").await.ok()?;
            let progressing = condition(&d, "Progressing")?;
            (progressing.0 == "False").then_some(progressing)
        },
    )
    .await;
    assert_eq!(progressing.1, "ProgressDeadlineExceeded");
    let d = api.get("crash").await.unwrap();
    assert_eq!(d.status.unwrap().available_replicas.unwrap_or(0), 0);
    ns.delete().await;
}

#[tokio::test]
async fn deleting_a_namespace_completes() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "doomed").await;
    let name = ns.name.clone();
    Api::<Deployment>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &deployment("web", None))
        .await
        .unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .delete(&name, &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("the namespace to disappear", Duration::from_secs(60), || async {
        matches!(namespaces.get_opt(&name).await, Ok(None)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_resolver_finds_built_in_kinds_and_crds_installed_later() {
    use kustomize_controller::kube_ext::{ResolveError, ResourceResolver};
    let client = client().await;
    let resolver = ResourceResolver::new(client.clone());
    let deployment = resolver.resolve("apps/v1", "Deployment").await.unwrap();
    assert_eq!(
        (deployment.resource.plural.as_str(), deployment.namespaced),
        ("deployments", true)
    );
    let namespace = resolver.resolve("v1", "Namespace").await.unwrap();
    assert!(!namespace.namespaced);
    let missing = resolver
        .resolve("example.invalid/v1", "Widget")
        .await
        .unwrap_err();
    assert!(matches!(missing, ResolveError::UnknownKind { .. }), "{missing}");
    assert_eq!(
        missing.to_string(),
        "no matches for kind \"Widget\" in version \"example.invalid/v1\""
    );

    kustomization_crd(&client).await;
    let ks = resolver
        .resolve("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
        .await
        .unwrap();
    assert_eq!(ks.resource.plural, "kustomizations");
}
