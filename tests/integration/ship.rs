//! The deploy manifests validate against a real API server, and `diff` previews what an
//! apply would change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kustomize::{BuildOptions, packed};
use kustomize_controller::api::KustomizationSpec;
use kustomize_controller::applier::{Action, ApplyRequest, Owner};
use kustomize_controller::flux;
use serde_json::{Value, json};

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
        "CustomResourceDefinition/imagerepositories.image.toolkit.fluxcd.io",
        "CustomResourceDefinition/imagepolicies.image.toolkit.fluxcd.io",
        "ServiceAccount/flux-system/image-reflector-controller",
        "ClusterRole/image-reflector-controller",
        "ClusterRoleBinding/image-reflector-controller",
        "Role/flux-system/image-reflector-controller-leader-election",
        "RoleBinding/flux-system/image-reflector-controller-leader-election",
        "Deployment/flux-system/image-reflector-controller",
    ] {
        assert!(
            validated.iter().any(|v| v == expected),
            "{expected} missing from {validated:?}"
        );
    }
}

/// A file of Flux's image-reflector-controller module (`E2E_FLUX_IRC_CRDS` is its
/// `config/crd/bases`), read as the reference our install is checked against.
fn flux_irc_config(file: &str) -> Value {
    let crds = std::env::var("E2E_FLUX_IRC_CRDS")
        .expect("E2E_FLUX_IRC_CRDS is not set: `make test` exports it from e2e/fluxirc/crds.sh");
    let path = Path::new(&crds).join("../..").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|v: &Value| !v.is_null())
        .unwrap()
}

/// Every (group, resource, verb) a role's rules grant.
fn grants(rules: &Value) -> BTreeSet<(String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in rules.as_array().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// `config/` installs the image-reflector-controller as Flux's stock Deployment does (args,
/// env, ports, probes, volumes, read-only root) with at least Flux's rights and its CRDs.
#[test]
fn config_installs_the_image_reflector_controller_as_flux_does() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let built = flux::build(
        &config,
        &config,
        &offline_spec(),
        &BTreeMap::new(),
        &BuildOptions::new(),
    )
    .unwrap();
    let objects = packed::values(&built.objects);
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name} missing from config/"))
            .clone()
    };
    let ours = find("Deployment", "image-reflector-controller");
    let flux = flux_irc_config("manager/deployment.yaml");
    assert_eq!(ours["metadata"]["namespace"], "flux-system");
    let (pod, flux_pod) = (
        &ours["spec"]["template"]["spec"],
        &flux["spec"]["template"]["spec"],
    );
    let (container, flux_container) = (&pod["containers"][0], &flux_pod["containers"][0]);
    assert_eq!(container["name"], flux_container["name"]);
    for field in [
        "args",
        "env",
        "ports",
        "readinessProbe",
        "livenessProbe",
        "volumeMounts",
    ] {
        assert_eq!(container[field], flux_container[field], "container {field}");
    }
    assert_eq!(
        json!([
            "--watch-all-namespaces",
            "--log-level=info",
            "--log-encoding=json",
            "--enable-leader-election"
        ]),
        container["args"]
    );
    assert_eq!(pod["volumes"], flux_pod["volumes"]);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        pod["securityContext"]["fsGroup"],
        flux_pod["securityContext"]["fsGroup"]
    );
    assert_eq!(
        container["image"],
        "ghcr.io/kustomize-controller-rs/image-reflector-controller:v0.1.0"
    );
    assert_eq!(pod["serviceAccountName"], "image-reflector-controller");

    let role = find("ClusterRole", "image-reflector-controller");
    let missing: Vec<_> = grants(&flux_irc_config("rbac/role.yaml")["rules"])
        .difference(&grants(&role["rules"]))
        .cloned()
        .collect();
    assert!(missing.is_empty(), "Flux grants what ours does not: {missing:?}");
    let binding = find("ClusterRoleBinding", "image-reflector-controller");
    assert_eq!(binding["roleRef"]["name"], "image-reflector-controller");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "image-reflector-controller", "namespace": "flux-system"}])
    );
    let lease_role = find("Role", "image-reflector-controller-leader-election");
    assert!(
        grants(&lease_role["rules"]).contains(&(
            "coordination.k8s.io".into(),
            "leases".into(),
            "update".into()
        )),
        "{lease_role}"
    );
    for crd in ["imagerepositories", "imagepolicies"] {
        find(
            "CustomResourceDefinition",
            &format!("{crd}.image.toolkit.fluxcd.io"),
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

/// A `diff` run's inputs: a namespace for the objects, the tree to build, and a Kustomization
/// file kept outside the tree (or the build would apply the Kustomization object itself).
struct DiffInputs {
    ns: TestNamespace,
    tree: tempfile::TempDir,
    spec_dir: tempfile::TempDir,
}

impl DiffInputs {
    async fn new(prefix: &str) -> Self {
        let ns = TestNamespace::new(&client().await, prefix).await;
        let spec_dir = tempfile::tempdir().unwrap();
        std::fs::write(
            spec_dir.path().join("ks.yaml"),
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: app, namespace: flux-system}\n\
             spec: {interval: 5m, prune: true, sourceRef: {kind: GitRepository, name: app}}\n",
        )
        .unwrap();
        Self {
            ns,
            tree: tempfile::tempdir().unwrap(),
            spec_dir,
        }
    }

    fn namespace(&self) -> &str {
        &self.ns.name
    }

    fn tree(&self) -> &Path {
        self.tree.path()
    }

    /// `kustomize-controller diff` of the tree with the Kustomization file.
    fn run_diff(&self) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
            .args(["diff", ".", "--root"])
            .arg(self.tree())
            .arg("--kustomization")
            .arg(self.spec_dir.path().join("ks.yaml"))
            .output()
            .expect("run kustomize-controller diff")
    }

    async fn delete(self) {
        self.ns.delete().await;
    }
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
    };
    let changes = applier.apply(request).await.unwrap();
    assert!(
        changes.entries.iter().all(|e| e.action == Action::Created),
        "{changes}"
    );
}

#[tokio::test]
async fn diff_exits_0_without_drift_and_1_with_a_masked_diff() {
    let diff = DiffInputs::new("diff").await;
    let ns = diff.namespace();
    write_tree(diff.tree(), ns, "hello", "first-s3cret");
    apply_tree(diff.tree()).await;

    let unchanged = diff.run_diff();
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

    write_tree(diff.tree(), ns, "goodbye", "second-s3cret");
    let drifted = diff.run_diff();
    let stdout = String::from_utf8_lossy(&drifted.stdout);
    assert_eq!(
        drifted.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&drifted.stderr)
    );
    assert!(
        stdout.contains(&format!("ConfigMap/{ns}/settings configured")),
        "{stdout}"
    );
    assert!(
        stdout.contains("-  greeting: hello") && stdout.contains("+  greeting: goodbye"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Secret/{ns}/credentials configured")),
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
    diff.delete().await;
}

#[tokio::test]
async fn diff_of_an_invalid_object_names_it_and_exits_2() {
    let diff = DiffInputs::new("diffbad").await;
    let ns = diff.namespace();
    std::fs::write(
        diff.tree().join("deployment.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: broken, namespace: {ns}}}\n\
             spec: {{selector: {{matchLabels: {{app: x}}}}, template: {{metadata: {{labels: {{app: x}}}}, spec: {{containers: []}}}}}}\n"
        ),
    )
    .unwrap();
    let out = diff.run_diff();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("Deployment/{ns}/broken")), "{stderr}");
    assert!(stderr.contains("spec.template.spec.containers"), "{stderr}");
    diff.delete().await;
}
