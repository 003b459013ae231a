//! Expected values follow Flux's rules for a Kustomization's build (the root kustomization
//! generated from the YAML files when there is none, the spec's overrides on top of it,
//! strict post-build substitution, `commonMetadata` last) and, for built objects,
//! `kustomize build` v5.8.1 on the equivalent kustomization.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use kustomize::loader::Loader;
use kustomize::packed;
use serde_json::{Value, json};

use super::*;
use crate::api::kustomization::{BuildMetadata, Image, Patch, PostBuild, Selector};
use crate::error::Retry;

/// A temporary directory holding `files` (path, text).
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = tmp.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    tmp
}

fn spec() -> KustomizationSpec {
    serde_json::from_value(json!({
        "interval": "1m",
        "prune": true,
        "sourceRef": {"kind": "GitRepository", "name": "repo"},
    }))
    .unwrap()
}

fn generated(root: &Path, dir: &str, spec: &KustomizationSpec) -> Result<Value, GenerateError> {
    let loader = Loader::new(root, 1 << 20).unwrap();
    let text = root::root_kustomization(&loader, &loader.root().join(dir), spec)?;
    Ok(serde_yaml::from_str(&text).unwrap())
}

/// Builds the directory `app` below `root` with the default options.
fn build_app(
    root: &Path,
    spec: &KustomizationSpec,
    vars: &BTreeMap<String, String>,
) -> Result<Built, FluxBuildError> {
    build(root, Path::new("app"), spec, vars, &BuildOptions::default())
}

const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  key: value\n";
const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.0\n";

#[test]
fn without_a_kustomization_file_every_yaml_file_and_kustomization_dir_is_a_resource() {
    let tmp = tree(&[
        ("app/b.yaml", CONFIG_MAP),
        ("app/a/deploy.yml", DEPLOYMENT),
        (
            "app/a/deeper/more.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n",
        ),
        ("app/base/kustomization.yaml", "resources: [cm.yaml]\n"),
        ("app/base/cm.yaml", CONFIG_MAP),
        // Not descended into: a subdirectory with a kustomization file is one resource.
        ("app/base/broken.yaml", "not: [valid"),
        ("app/README.md", "# docs"),
        ("app/values.json", "{}"),
    ]);
    let k = generated(tmp.path(), "app", &spec()).unwrap();
    assert_eq!(
        k,
        json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["./a/deeper/more.yaml", "./a/deploy.yml", "./b.yaml", "./base"],
        })
    );
}

#[test]
fn a_file_that_is_not_kubernetes_yaml_fails_and_is_named() {
    let tmp = tree(&[
        ("app/ok.yaml", CONFIG_MAP),
        ("app/sub/bad.yaml", "kind: A\n---\n- a list\n"),
    ]);
    let err = generated(tmp.path(), "app", &spec()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("failed to decode Kubernetes YAML from ./sub/bad.yaml: "),
        "{message}"
    );
    let tmp = tree(&[("app/broken.yml", "a: [1, 2\nb: 3\n")]);
    let message = generated(tmp.path(), "app", &spec()).unwrap_err().to_string();
    assert!(
        message.starts_with("failed to decode Kubernetes YAML from ./broken.yml: "),
        "{message}"
    );
}

#[test]
fn an_empty_directory_builds_to_nothing() {
    let tmp = tree(&[("app/notes.txt", "nothing here")]);
    let k = generated(tmp.path(), "app", &spec()).unwrap();
    assert_eq!(k["namespace"], "_placeholder");
    assert!(k.get("resources").is_none());
    let built = build_app(tmp.path(), &spec(), &BTreeMap::new()).unwrap();
    assert_eq!(packed::values(&built.objects), Vec::<Value>::new());
}

#[test]
fn an_existing_file_is_decoded_leniently() {
    let tmp = tree(&[
        (
            "app/kustomization.yaml",
            "resources: [cm.yaml]\nnotAField: true\nnamespace: ns\n",
        ),
        ("app/cm.yaml", CONFIG_MAP),
        (
            "gen/kustomization.yml",
            "configMapGenerator:\n- name: g\n  literals: [a=b]\n",
        ),
    ]);
    let k = generated(tmp.path(), "app", &spec()).unwrap();
    assert_eq!(
        k,
        json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "ns",
            "resources": ["cm.yaml"],
        })
    );
    // Without resources Flux asks for origin annotations, so kustomize accepts the root.
    let k = generated(tmp.path(), "gen", &spec()).unwrap();
    assert_eq!(k["buildMetadata"], json!(["originAnnotations"]));
}

#[test]
fn spec_overrides_are_applied_to_the_root() {
    let tmp = tree(&[
        (
            "app/kustomization.yaml",
            "resources: [deploy.yaml]\nnamespace: from-file\nnamePrefix: file-\npatches:\n- path: p.yaml\nimages:\n- name: nginx\n  newTag: \"1.1\"\n- name: redis\n  newName: my/redis\ncomponents: [../comp-a]\n",
        ),
        ("app/deploy.yaml", DEPLOYMENT),
        (
            "comp-a/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
        ),
        (
            "comp-b/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
        ),
    ]);
    let mut spec = spec();
    spec.target_namespace = Some("prod".into());
    spec.name_prefix = Some("flux-".into());
    spec.name_suffix = Some("-v2".into());
    spec.patches = vec![Patch {
        patch: "- op: add\n  path: /metadata/labels\n  value: {a: b}\n".into(),
        target: Some(Selector {
            kind: Some("Deployment".into()),
            ..Default::default()
        }),
    }];
    spec.images = vec![
        Image {
            name: "nginx".into(),
            new_name: Some("mirror/nginx".into()),
            new_tag: None,
            digest: Some("sha256:abc".into()),
        },
        Image {
            name: "busybox".into(),
            new_name: None,
            new_tag: Some("1.36".into()),
            digest: None,
        },
    ];
    spec.components = vec!["../comp-b".into()];
    spec.build_metadata = vec![BuildMetadata::OriginAnnotations];
    let k = generated(tmp.path(), "app", &spec).unwrap();
    assert_eq!(k["namespace"], "prod");
    assert_eq!(k["namePrefix"], "flux-");
    assert_eq!(k["nameSuffix"], "-v2");
    assert_eq!(
        k["patches"],
        json!([
            {"path": "p.yaml"},
            {"patch": "- op: add\n  path: /metadata/labels\n  value: {a: b}\n", "target": {"kind": "Deployment"}},
        ])
    );
    assert_eq!(
        k["images"],
        json!([
            {"name": "nginx", "newName": "mirror/nginx", "digest": "sha256:abc"},
            {"name": "redis", "newName": "my/redis"},
            {"name": "busybox", "newTag": "1.36"},
        ])
    );
    assert_eq!(k["components"], json!(["../comp-a", "../comp-b"]));
    assert_eq!(k["buildMetadata"], json!(["originAnnotations"]));
}

#[test]
fn missing_components_fail_in_kustomize_unless_ignored() {
    let tmp = tree(&[
        ("app/kustomization.yaml", "resources: [cm.yaml]\n"),
        ("app/cm.yaml", CONFIG_MAP),
        (
            "comp/kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonLabels: {c: d}\n",
        ),
    ]);
    let mut spec = spec();
    spec.components = vec!["../comp".into(), "../absent".into()];
    let k = generated(tmp.path(), "app", &spec).unwrap();
    assert_eq!(k["components"], json!(["../comp", "../absent"]));
    let err = build_app(tmp.path(), &spec, &BTreeMap::new()).unwrap_err();
    assert!(err.to_string().starts_with("kustomize build failed: "), "{err}");
    assert!(err.to_string().contains("absent"), "{err}");
    spec.ignore_missing_components = true;
    let k = generated(tmp.path(), "app", &spec).unwrap();
    assert_eq!(k["components"], json!(["../comp"]));
    let built = build_app(tmp.path(), &spec, &BTreeMap::new()).unwrap();
    assert_eq!(
        packed::values(&built.objects)[0]["metadata"]["labels"],
        json!({"c": "d"})
    );
}

#[test]
fn component_paths_must_be_local_and_relative() {
    let tmp = tree(&[("app/cm.yaml", CONFIG_MAP)]);
    // The table of Flux's own IsLocalRelativePath test (fluxcd/pkg kustomize).
    for path in [
        "/etc/comp",
        "https://example.com/comp",
        "file:///foobar.yaml",
        "git@github.com:owner/repo",
        "ssh://git@github.com/owner/repo",
        "github.com/owner/repo",
    ] {
        let mut spec = spec();
        spec.components = vec![path.into()];
        let err = generated(tmp.path(), "app", &spec).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("component path '{path}' must be local and relative")
        );
    }
}

#[test]
fn local_component_paths_are_accepted() {
    let tmp = tree(&[("app/cm.yaml", CONFIG_MAP)]);
    let mut spec = spec();
    spec.components = [
        "foobar.yaml",
        "./foobar.yaml",
        "file://foobar.yaml",
        "../shared/comp",
    ]
    .map(String::from)
    .into();
    let k = generated(tmp.path(), "app", &spec).unwrap();
    assert_eq!(
        k["components"],
        json!([
            "foobar.yaml",
            "./foobar.yaml",
            "file://foobar.yaml",
            "../shared/comp"
        ])
    );
}

#[test]
fn objects_without_kind_or_name_fail_the_generation() {
    for (text, reason) in [
        ("apiVersion: v1\nmetadata:\n  name: x\n", "missing kind"),
        (
            "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\n",
            "missing metadata.name",
        ),
    ] {
        let tmp = tree(&[("app/ok.yaml", CONFIG_MAP), ("app/values.yaml", text)]);
        let message = generated(tmp.path(), "app", &spec()).unwrap_err().to_string();
        assert!(
            message.starts_with("failed to decode Kubernetes YAML from ./values.yaml: "),
            "{message}"
        );
        assert!(message.contains(reason), "{message}");
    }
    // A List needs no name.
    let tmp = tree(&[("app/list.yaml", "apiVersion: v1\nkind: List\nitems: []\n")]);
    assert_eq!(
        generated(tmp.path(), "app", &spec()).unwrap()["resources"],
        json!(["./list.yaml"])
    );
}

#[test]
fn reads_stay_inside_the_artifact_root() {
    let tmp = tree(&[("root/app/cm.yaml", CONFIG_MAP), ("outside.yaml", CONFIG_MAP)]);
    std::os::unix::fs::symlink(
        tmp.path().join("outside.yaml"),
        tmp.path().join("root/app/link.yaml"),
    )
    .unwrap();
    let err = generated(&tmp.path().join("root"), "app", &spec()).unwrap_err();
    assert!(err.to_string().contains("outside the artifact root"), "{err}");
}

/// The whole pipeline on a small tree. Expected objects: `kustomize build` of
/// `resources: [cm.yaml, deploy.yaml]` with `namespace: prod`, `namePrefix: flux-` and the
/// same patch, then Flux's substitution and commonMetadata applied by hand.
#[test]
fn build_runs_overrides_substitution_and_common_metadata_in_order() {
    let tmp = tree(&[
        (
            "app/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  labels: {team: x}\ndata:\n  env: ${env}\n  region: ${region:=eu}\n",
        ),
        ("app/deploy.yaml", DEPLOYMENT),
    ]);
    let mut spec = spec();
    spec.target_namespace = Some("prod".into());
    spec.name_prefix = Some("flux-".into());
    spec.patches = vec![Patch {
        patch: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n".into(),
        target: None,
    }];
    spec.post_build = Some(PostBuild {
        substitute: None,
        substitute_from: vec![],
        substitute_strategy: None,
    });
    spec.common_metadata = Some(CommonMetadata {
        labels: Some([("team".to_string(), "platform".to_string())].into()),
        annotations: Some([("owner".to_string(), "ops".to_string())].into()),
    });
    let vars = merge_vars(
        vec![],
        Some(&[("env".to_string(), "production".to_string())].into()),
    );
    let built = build_app(tmp.path(), &spec, &vars).unwrap();
    let expected: Vec<Value> = vec![
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "flux-app", "namespace": "prod", "labels": {"team": "platform"}, "annotations": {"owner": "ops"}},
            "data": {"env": "production", "region": "eu"},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "flux-web", "namespace": "prod", "labels": {"team": "platform"}, "annotations": {"owner": "ops"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.0"}]}}},
        }),
    ];
    assert_eq!(packed::values(&built.objects), expected);
    assert!(
        built.digest.starts_with("sha256:") && built.digest.len() == 7 + 64,
        "{}",
        built.digest
    );

    // commonMetadata is not part of the digest (Flux applies it after building).
    spec.common_metadata = None;
    let without = build_app(tmp.path(), &spec, &vars).unwrap();
    assert_eq!(without.digest, built.digest);
    assert_eq!(
        packed::values(&without.objects)[0]["metadata"]["labels"],
        json!({"team": "x"})
    );
}

/// Flux's docs: commonMetadata labels and annotations go on every object's metadata, and
/// they do so whether or not postBuild is set.
#[test]
fn common_metadata_applies_without_post_build() {
    let tmp = tree(&[(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  labels: {team: x, tier: web}\n",
    )]);
    let mut spec = spec();
    spec.common_metadata = Some(CommonMetadata {
        labels: Some([("team".to_string(), "platform".to_string())].into()),
        annotations: None,
    });
    let built = build_app(tmp.path(), &spec, &BTreeMap::new()).unwrap();
    assert_eq!(
        packed::values(&built.objects),
        vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "app", "labels": {"team": "platform", "tier": "web"}},
        })]
    );
}

#[test]
fn post_build_errors_name_the_object_and_nothing_runs_without_post_build() {
    let tmp = tree(&[(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  a: ${missing}\n",
    )]);
    let mut spec = spec();
    let vars: BTreeMap<String, String> = [("other".to_string(), "x".to_string())].into();
    let untouched = build_app(tmp.path(), &spec, &vars).unwrap();
    assert_eq!(packed::values(&untouched.objects)[0]["data"]["a"], "${missing}");
    spec.post_build = Some(PostBuild::default());
    let err = build_app(tmp.path(), &spec, &vars).unwrap_err();
    assert_eq!(
        err.to_string(),
        "post build failed for 'ConfigMap.v1.[noGrp]/app': envsubst error: variable substitution failed: variable not set (strict mode): \"missing\""
    );
    assert_eq!((err.reason(), err.retry()), ("BuildFailed", Retry::RetryInterval));
    // With the strict gate off, the unset variable expands to nothing (YAML null).
    let lenient = build_decrypting(
        tmp.path(),
        Path::new("app"),
        &spec,
        &vars,
        &BuildOptions::default(),
        false,
        None,
        Deadline::after(Duration::from_secs(60)),
    )
    .unwrap();
    assert_eq!(packed::values(&lenient.objects)[0]["data"]["a"], Value::Null);
}

/// Before, a build abandoned at spec.timeout substituted every object to the end on its
/// blocking thread; now each object checks the deadline first.
#[test]
fn substitution_stops_at_the_deadline() {
    let tmp = tree(&[("app/cm.yaml", CONFIG_MAP)]);
    let mut spec = spec();
    spec.post_build = Some(PostBuild::default());
    let vars: BTreeMap<String, String> = [("a".to_string(), "x".to_string())].into();
    let options = BuildOptions::default();
    let passed = Deadline::from(Instant::now() - Duration::from_secs(61), Duration::from_secs(60));
    let err = build_until(tmp.path(), Path::new("app"), &spec, &vars, &options, passed).unwrap_err();
    assert_eq!(err.to_string(), "the build ran out of time (spec.timeout 1m0s)");
    assert_eq!((err.reason(), err.retry()), ("BuildFailed", Retry::RetryInterval));
    let fresh = Deadline::after(Duration::from_secs(60));
    assert!(build_until(tmp.path(), Path::new("app"), &spec, &vars, &options, fresh).is_ok());
}

#[test]
fn kustomize_errors_are_prefixed() {
    let tmp = tree(&[("app/kustomization.yaml", "resources: [missing.yaml]\n")]);
    let err = build_app(tmp.path(), &spec(), &BTreeMap::new()).unwrap_err();
    assert!(err.to_string().starts_with("kustomize build failed: "), "{err}");
    assert!(err.to_string().contains("missing.yaml"), "{err}");
    assert_eq!((err.reason(), err.retry()), ("BuildFailed", Retry::RetryInterval));
}

/// A root without resources gets `buildMetadata: [originAnnotations]` from Flux. Expected:
/// `kustomize build` of the same file with that line added.
#[test]
fn a_root_without_resources_builds_with_origin_annotations() {
    let tmp = tree(&[(
        "app/kustomization.yaml",
        "configMapGenerator:\n- name: settings\n  literals: [mode=fast]\n  options: {disableNameSuffixHash: true}\n",
    )]);
    let built = build_app(tmp.path(), &spec(), &BTreeMap::new()).unwrap();
    let origin = "configuredIn: kustomization.yaml\nconfiguredBy:\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n";
    assert_eq!(
        packed::values(&built.objects),
        vec![json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "annotations": {"config.kubernetes.io/origin": origin}},
            "data": {"mode": "fast"},
        })]
    );
}
