//! `kustomize-controller build` through Flux's layer: no cluster needed, the binary runs on
//! a temporary tree. Expected output follows Flux's rules (generated kustomization,
//! targetNamespace, inline substitute winning over substituteFrom, strict variables).

use std::path::Path;
use std::process::Command;

fn run(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
        .arg("build")
        .args(args)
        .arg("--root")
        .arg(root)
        .output()
        .expect("the binary runs")
}

/// A temporary tree holding `files` (path, content); directories are created as needed.
fn tree_of(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let path = tmp.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    tmp
}

/// A ConfigMap that needs the variables `env` and `region`.
const NEEDS_ENV_AND_REGION: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  env: ${env}\n  region: ${region}\n";

/// A Kustomization setting targetNamespace `prod`, a label and `region=eu`.
const PROD_KUSTOMIZATION: &str = "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: app}\nspec:\n  interval: 5m\n  prune: true\n  sourceRef: {kind: GitRepository, name: repo}\n  targetNamespace: prod\n  postBuild:\n    substitute: {region: eu}\n  commonMetadata:\n    labels: {team: platform}\n";

/// `build app --kustomization ks.yaml` plus `extra_args` on a tree of [`NEEDS_ENV_AND_REGION`]
/// and [`PROD_KUSTOMIZATION`].
fn build_app(extra_args: &[&str]) -> std::process::Output {
    let tmp = tree_of(&[
        ("app/cm.yaml", NEEDS_ENV_AND_REGION),
        ("ks.yaml", PROD_KUSTOMIZATION),
    ]);
    let dir = tmp.path().join("app");
    let ks = tmp.path().join("ks.yaml");
    let mut args = vec![dir.to_str().unwrap(), "--kustomization", ks.to_str().unwrap()];
    args.extend(extra_args);
    run(tmp.path(), &args)
}

#[test]
fn build_applies_the_kustomization_spec_and_variables() {
    let output = build_app(&["--var", "env=prod", "--var", "region=us"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let object: serde_json::Value = serde_yaml::from_slice(&output.stdout).unwrap();
    assert_eq!(
        object,
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "app", "namespace": "prod", "labels": {"team": "platform"}},
            "data": {"env": "prod", "region": "eu"},
        })
    );
}

#[test]
fn build_fails_on_a_missing_variable_and_names_the_object() {
    let output = build_app(&[]);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("post build failed for 'ConfigMap.v1.[noGrp]/app': envsubst error: variable substitution failed: variable not set (strict mode): \"env\""),
        "{stderr}"
    );
}

#[test]
fn a_patch_target_that_selects_nothing_builds_with_a_warning_naming_file_and_target() {
    // kustomize v5.8.1 accepts such a patch (see the conformance case
    // patches-target-matches-nothing-json6902), so the build succeeds; the typo is reported.
    let tmp = tree_of(&[
        (
            "app/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n",
        ),
        (
            "app/kustomization.yaml",
            "resources: [cm.yaml]\npatches:\n- target: {kind: Deployment, name: web}\n  patch: |-\n    - op: replace\n      path: /spec/replicas\n      value: 3\n",
        ),
    ]);
    let app = tmp.path().join("app");
    let output = run(tmp.path(), &[app.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let object: serde_json::Value = serde_yaml::from_slice(&output.stdout).unwrap();
    assert_eq!(
        object,
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}})
    );
    assert_eq!(
        stderr.trim(),
        "warning: app/kustomization.yaml: patch target kind=\"Deployment\" name=\"web\" matches no resource"
    );
}
