//! The committed CRDs on a real API server, driven with the real `kubectl`: they install, the
//! server defaults and rejects ImageRepositories and ImagePolicies as Flux's CRDs make it do
//! (defaults, patterns, enums, limits, the CEL rules with Flux's messages), v1beta2 manifests
//! still apply with Flux's deprecation warning, and `kubectl get` prints Flux's columns, by
//! short name and category too.
//!
//! Needs the e2e control plane (`KUBECONFIG`, and `E2E_BIN` for kubectl): `make test` runs it.

mod support;

use std::process::Output;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

/// kubectl's discovery cache, fresh for this run: one written before the CRDs were installed
/// would hide their short names and categories.
const CACHE_DIR: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/irc-api-server-kubectl-cache");

fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let cache = format!("--cache-dir={CACHE_DIR}");
    let args: Vec<&str> = std::iter::once(cache.as_str())
        .chain(args.iter().copied())
        .collect();
    test_support::kubectl(&args, stdin)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `kubectl` that must succeed; its stdout and stderr.
fn ok(args: &[&str], stdin: Option<&str>) -> (String, String) {
    let out = kubectl(args, stdin);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "kubectl {args:?} failed:\n{stdout}{stderr}");
    (stdout, stderr)
}

/// Installs the committed CRDs (what `config/` installs) once per run and waits until they are
/// served.
fn install_crds() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let _ = std::fs::remove_dir_all(CACHE_DIR);
        support::cluster::install_crds();
    });
}

/// A namespace of its own, deleted when the test ends.
struct Namespace(String);

impl Namespace {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        install_crds();
        let name = format!(
            "irc-api-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ok(&["create", "namespace", &name], None);
        Self(name)
    }

    fn apply(&self, object: &Value) -> Output {
        kubectl(&["apply", "-n", &self.0, "-f", "-"], Some(&object.to_string()))
    }

    fn get(&self, resource: &str) -> Value {
        let (stdout, _) = ok(&["get", "-n", &self.0, resource, "-o", "json"], None);
        serde_json::from_str(&stdout).unwrap()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"], None);
    }
}

fn repository(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImageRepository",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn policy(name: &str, spec: Value) -> Value {
    let mut full = json!({"imageRepositoryRef": {"name": "podinfo"}, "policy": {"alphabetical": {}}});
    for (key, value) in spec.as_object().unwrap() {
        full[key] = value.clone();
    }
    json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImagePolicy",
        "metadata": {"name": name},
        "spec": full,
    })
}

/// The apply is refused and kubectl says why, containing `expected`.
fn refused(out: Output, expected: &str) {
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "accepted, expected a refusal with {expected:?}"
    );
    assert!(stderr.contains(expected), "expected {expected:?} in:\n{stderr}");
}

#[test]
fn the_server_applies_fluxs_defaults() {
    let ns = Namespace::new();
    let out = ns.apply(&repository(
        "podinfo",
        json!({"image": "ghcr.io/stefanprodan/podinfo", "interval": "5m"}),
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let repo = ns.get("imagerepository/podinfo");
    assert_eq!(repo["spec"]["exclusionList"], json!([r"^.*\.sig$"]));
    assert_eq!(repo["spec"]["provider"], "generic");
    assert_eq!(repo["status"], json!({"observedGeneration": -1}));

    let out = ns.apply(&policy(
        "latest",
        json!({"policy": {"numerical": {}}, "filterTags": {"pattern": "^main-(?P<ts>[0-9]+)"}}),
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pol = ns.get("imagepolicy/latest");
    assert_eq!(pol["spec"]["digestReflectionPolicy"], "Never");
    assert_eq!(pol["spec"]["policy"], json!({"numerical": {"order": "asc"}}));
    // Absent stays absent: no default brought by our types that Flux's CRD does not have.
    assert_eq!(
        pol["spec"]["filterTags"],
        json!({"pattern": "^main-(?P<ts>[0-9]+)"})
    );
    assert_eq!(pol["status"], json!({"observedGeneration": -1}));
}

#[test]
fn the_server_refuses_what_fluxs_crds_refuse() {
    let ns = Namespace::new();
    let image = "ghcr.io/stefanprodan/podinfo";
    for (spec, expected) in [
        (json!({"image": image}), "spec.interval: Required value"),
        (json!({"interval": "5m"}), "spec.image: Required value"),
        (
            json!({"image": image, "interval": "5 minutes"}),
            "spec.interval: Invalid value",
        ),
        // A scan timeout in hours is refused (Flux's pattern has no `h`).
        (
            json!({"image": image, "interval": "5m", "timeout": "1h"}),
            "spec.timeout: Invalid value",
        ),
        (
            json!({"image": image, "interval": "5m", "provider": "AWS"}),
            "spec.provider: Unsupported value: \"AWS\"",
        ),
        (
            json!({"image": image, "interval": "5m", "exclusionList": vec!["x"; 26]}),
            "spec.exclusionList: Too many: 26: must have at most 25 items",
        ),
        (
            json!({"image": image, "interval": "5m", "serviceAccountName": "a".repeat(254)}),
            "spec.serviceAccountName: Too long",
        ),
        (
            json!({"image": image, "interval": "5m", "accessFrom": {}}),
            "spec.accessFrom.namespaceSelectors: Required value",
        ),
        (
            json!({"image": image, "interval": "5m", "secretRef": {}}),
            "spec.secretRef.name: Required value",
        ),
    ] {
        refused(ns.apply(&repository("bad", spec)), expected);
    }

    for (spec, expected) in [
        (
            json!({"interval": "5m"}),
            "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'",
        ),
        (
            json!({"interval": "5m", "digestReflectionPolicy": "IfNotPresent"}),
            "spec.interval is only accepted when spec.digestReflectionPolicy is set to 'Always'",
        ),
        (
            json!({"digestReflectionPolicy": "Always"}),
            "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'",
        ),
        (
            json!({"digestReflectionPolicy": "Sometimes"}),
            "spec.digestReflectionPolicy: Unsupported value: \"Sometimes\"",
        ),
        (
            json!({"policy": {"alphabetical": {"order": "ASC"}}}),
            "spec.policy.alphabetical.order: Unsupported value: \"ASC\"",
        ),
        (
            json!({"policy": {"semver": {}}}),
            "spec.policy.semver.range: Required value",
        ),
        (
            json!({"imageRepositoryRef": {}}),
            "spec.imageRepositoryRef.name: Required value",
        ),
    ] {
        refused(ns.apply(&policy("bad", spec)), expected);
    }
    // Both CEL rules let the one valid combination through.
    let out = ns.apply(&policy(
        "digest",
        json!({"interval": "5m", "digestReflectionPolicy": "Always"}),
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn v1beta2_manifests_apply_with_fluxs_deprecation_warning() {
    let ns = Namespace::new();
    let mut repo = repository(
        "legacy",
        json!({"image": "ghcr.io/stefanprodan/podinfo", "interval": "1m"}),
    );
    repo["apiVersion"] = json!("image.toolkit.fluxcd.io/v1beta2");
    let out = ns.apply(&repo);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("v1beta2 ImageRepository is deprecated, upgrade to v1"),
        "{stderr}"
    );
    let mut pol = policy("legacy", json!({}));
    pol["apiVersion"] = json!("image.toolkit.fluxcd.io/v1beta2");
    let out = ns.apply(&pol);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("v1beta2 ImagePolicy is deprecated, upgrade to v1"),
        "{}",
        text(&out.stderr)
    );
    // Stored as v1, defaulted as v1.
    let stored = ns.get("imagerepositories.v1.image.toolkit.fluxcd.io/legacy");
    assert_eq!(stored["apiVersion"], "image.toolkit.fluxcd.io/v1");
    assert_eq!(stored["spec"]["provider"], "generic");
}

#[test]
fn kubectl_prints_fluxs_columns_by_short_name_and_category() {
    let ns = Namespace::new();
    let out = ns.apply(&repository(
        "podinfo",
        json!({"image": "ghcr.io/stefanprodan/podinfo", "interval": "5m"}),
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ns.apply(&policy("latest", json!({})));
    assert!(out.status.success(), "{}", text(&out.stderr));

    let header = |args: &[&str]| {
        let mut all = vec!["get", "-n", ns.0.as_str()];
        all.extend_from_slice(args);
        let (stdout, _) = ok(&all, None);
        stdout
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(header(&["imgrepo"]), "NAME IMAGE TAGS READY STATUS AGE");
    assert_eq!(
        header(&["imagerepo", "-o", "wide"]),
        "NAME IMAGE TAGS READY STATUS LAST SCAN AGE"
    );
    assert_eq!(header(&["imgpol"]), "NAME IMAGE TAG READY STATUS AGE");
    assert_eq!(header(&["imagepol"]), "NAME IMAGE TAG READY STATUS AGE");
    for category in ["fluxcd-images", "fluxcd", "all"] {
        let (stdout, _) = ok(&["get", "-n", &ns.0, category, "-o", "name"], None);
        for object in [
            "imagerepository.image.toolkit.fluxcd.io/podinfo",
            "imagepolicy.image.toolkit.fluxcd.io/latest",
        ] {
            assert!(
                stdout.contains(object),
                "{category}: {object} missing from:\n{stdout}"
            );
        }
    }
}
