//! Issue 8: the deploy manifests validate against a real API server, and `diff` previews what an
//! apply would change.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kustomize_controller::api::KustomizationSpec;
use kustomize_controller::applier::{Action, ApplyRequest, Owner};
use kustomize_controller::build::{BuildOptions, flux, packed};
use serde_json::json;

use crate::support::applier::applier;
use crate::support::{TestNamespace, client};

fn offline_spec() -> KustomizationSpec {
    serde_json::from_value(
        json!({"interval": "10m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "x"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn config_builds_with_our_engine_and_validates_on_the_api_server() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let built = flux::build(
        &config,
        &config,
        &offline_spec(),
        &BTreeMap::new(),
        &BuildOptions::new(),
    )
    .unwrap();
    let client = client().await;
    // A real dry-run of the namespaced objects needs their namespace to exist.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "flux-system"}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;

    let (applier, _, _) = applier().await;
    let request = ApplyRequest {
        owner: Owner::new("config", "flux-system"),
        objects: packed::values(&built.objects),
        force: false,
        ignore: &[],
        revision: "",
        digest: "",
    };
    let diffs = applier
        .diff(request)
        .await
        .unwrap_or_else(|e| panic!("config/ does not validate: {e}"));
    let validated: Vec<String> = diffs.iter().map(|d| d.object.to_string()).collect();
    for expected in [
        "CustomResourceDefinition/kustomizations.kustomize.toolkit.fluxcd.io",
        "ServiceAccount/flux-system/kustomize-controller",
        "ClusterRole/kustomize-controller",
        "ClusterRoleBinding/kustomize-controller",
        "Role/flux-system/kustomize-controller-leader-election",
        "Deployment/flux-system/kustomize-controller",
        "Service/flux-system/kustomize-controller",
    ] {
        assert!(
            validated.iter().any(|v| v == expected),
            "{expected} missing from {validated:?}"
        );
    }
}

/// A tree with a ConfigMap and a Secret in `namespace`.
fn write_tree(dir: &Path, namespace: &str, greeting: &str, password: &str) {
    std::fs::write(
        dir.join("objects.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {namespace}}}\ndata: {{greeting: {greeting}}}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: credentials, namespace: {namespace}}}\nstringData: {{password: {password}}}\n"
        ),
    )
    .unwrap();
}

fn kustomization_file(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("ks.yaml");
    std::fs::write(
        &file,
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: app, namespace: flux-system}\n\
         spec: {interval: 5m, prune: true, sourceRef: {kind: GitRepository, name: app}}\n",
    )
    .unwrap();
    file
}

fn run_diff(root: &Path, ks: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
        .args(["diff", ".", "--root"])
        .arg(root)
        .arg("--kustomization")
        .arg(ks)
        .output()
        .expect("run kustomize-controller diff")
}

async fn apply_tree(root: &Path) {
    let built = flux::build(
        root,
        root,
        &offline_spec(),
        &BTreeMap::new(),
        &BuildOptions::new(),
    )
    .unwrap();
    let objects = packed::values(&built.objects);
    let (applier, _, _) = applier().await;
    let request = ApplyRequest {
        owner: Owner::new("app", "flux-system"),
        objects,
        force: false,
        ignore: &[],
        revision: "r1",
        digest: "d1",
    };
    let changes = applier.apply(request).await.unwrap();
    assert!(
        changes.entries.iter().all(|e| e.action == Action::Created),
        "{changes}"
    );
}

#[tokio::test]
async fn diff_exits_0_without_drift_and_1_with_a_masked_diff() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "diff").await;
    let tree = tempfile::tempdir().unwrap();
    // Outside the tree, or the build would apply the Kustomization object itself.
    let spec_dir = tempfile::tempdir().unwrap();
    let ks = kustomization_file(spec_dir.path());
    write_tree(tree.path(), &ns.name, "hello", "first-s3cret");
    apply_tree(tree.path()).await;

    let unchanged = run_diff(tree.path(), &ks);
    assert_eq!(
        unchanged.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&unchanged.stderr)
    );
    assert!(
        unchanged.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&unchanged.stdout)
    );

    write_tree(tree.path(), &ns.name, "goodbye", "second-s3cret");
    let drifted = run_diff(tree.path(), &ks);
    let stdout = String::from_utf8_lossy(&drifted.stdout);
    assert_eq!(
        drifted.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&drifted.stderr)
    );
    assert!(
        stdout.contains(&format!("ConfigMap/{}/settings configured", ns.name)),
        "{stdout}"
    );
    assert!(
        stdout.contains("-  greeting: hello") && stdout.contains("+  greeting: goodbye"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Secret/{}/credentials configured", ns.name)),
        "{stdout}"
    );
    for secret in ["first-s3cret", "second-s3cret"] {
        let encoded = serde_json::to_value(k8s_openapi::ByteString(secret.as_bytes().to_vec())).unwrap();
        let encoded = encoded.as_str().unwrap();
        assert!(
            !stdout.contains(secret) && !stdout.contains(encoded),
            "a Secret value leaked: {stdout}"
        );
    }
    ns.delete().await;
}

#[tokio::test]
async fn diff_of_an_invalid_object_names_it_and_exits_2() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "diffbad").await;
    let tree = tempfile::tempdir().unwrap();
    // Outside the tree, or the build would apply the Kustomization object itself.
    let spec_dir = tempfile::tempdir().unwrap();
    let ks = kustomization_file(spec_dir.path());
    std::fs::write(
        tree.path().join("deployment.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: broken, namespace: {}}}\n\
             spec: {{selector: {{matchLabels: {{app: x}}}}, template: {{metadata: {{labels: {{app: x}}}}, spec: {{containers: []}}}}}}\n",
            ns.name
        ),
    )
    .unwrap();
    let out = run_diff(tree.path(), &ks);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("Deployment/{}/broken", ns.name)),
        "{stderr}"
    );
    assert!(stderr.contains("spec.template.spec.containers"), "{stderr}");
    ns.delete().await;
}
