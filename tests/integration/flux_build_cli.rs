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

fn tree() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("app")).unwrap();
    std::fs::write(
        tmp.path().join("app/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  env: ${env}\n  region: ${region}\n",
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("ks.yaml"),
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: app}\nspec:\n  interval: 5m\n  prune: true\n  sourceRef: {kind: GitRepository, name: repo}\n  targetNamespace: prod\n  postBuild:\n    substitute: {region: eu}\n  commonMetadata:\n    labels: {team: platform}\n",
    )
    .unwrap();
    tmp
}

#[test]
fn build_applies_the_kustomization_spec_and_variables() {
    let tmp = tree();
    let dir = tmp.path().join("app");
    let ks = tmp.path().join("ks.yaml");
    let output = run(
        tmp.path(),
        &[
            dir.to_str().unwrap(),
            "--kustomization",
            ks.to_str().unwrap(),
            "--var",
            "env=prod",
            "--var",
            "region=us",
        ],
    );
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
    let tmp = tree();
    let dir = tmp.path().join("app");
    let ks = tmp.path().join("ks.yaml");
    let output = run(
        tmp.path(),
        &[dir.to_str().unwrap(), "--kustomization", ks.to_str().unwrap()],
    );
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
    let tmp = tempfile::tempdir().unwrap();
    let app = tmp.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n",
    )
    .unwrap();
    std::fs::write(
        app.join("kustomization.yaml"),
        "resources: [cm.yaml]\npatches:\n- target: {kind: Deployment, name: web}\n  patch: |-\n    - op: replace\n      path: /spec/replicas\n      value: 3\n",
    )
    .unwrap();
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
