//! The controller binary against a real API server and a real registry: an ImageRepository
//! becomes Ready with the registry's tags, a tag pushed later shows up after a
//! `reconcile.fluxcd.io/requestedAt` request, credentials come from a docker-config Secret,
//! an image with a tag stalls, and deletion removes the tag file and the finalizer.
//!
//! Needs the e2e control plane (`KUBECONFIG`, and `E2E_BIN` for kubectl) and Debian's
//! docker-registry: `make test` runs it.

mod support;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::cluster::{Harness, ok, ready, ready_is};
use test_support::kubectl;
use test_support::registry::{Options, Registry};

/// FluxStorage's checksum: sha256 of the tags in descending order, one a line.
fn checksum(tags: &[&str]) -> String {
    let text: String = tags.iter().map(|t| format!("{t}\n")).collect();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

fn image_repository(name: &str, image: &str, extra: Value) -> Value {
    let mut spec = json!({"image": image, "interval": "1h"});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
        "metadata": {"name": name}, "spec": spec,
    })
}

#[test]
fn scans_tags_and_rescans_on_request() {
    let registry = Registry::start(Options::default());
    registry.push("team/app", &["1.0.0", "1.1.0", "2.0.0", "sha256-x.sig"]);
    let harness = Harness::start("scan");
    let image = format!("{}/team/app", registry.host());
    harness.apply(image_repository("app", &image, json!({})));

    let repo = harness.wait_for("app", "Ready=True", |o| ready_is(o, "True", "Succeeded"));
    let want = ["2.0.0", "1.1.0", "1.0.0"];
    assert_eq!(
        ready(&repo).unwrap()["message"],
        format!("successful scan: found 3 tags with checksum {}", checksum(&want))
    );
    let status = &repo["status"];
    assert_eq!(status["lastScanResult"]["tagCount"], 3);
    assert_eq!(status["lastScanResult"]["latestTags"], json!(want));
    assert_eq!(status["canonicalImageName"], image);
    assert_eq!(status["observedExclusionList"], json!([r"^.*\.sig$"]));
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(repo["metadata"]["finalizers"], json!(["finalizers.fluxcd.io"]));
    assert_eq!(status["conditions"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(harness.http_status("/healthz"), "200");
    assert_eq!(harness.http_status("/readyz"), "200");
    let lease = ok(
        &[
            "get",
            "-n",
            &harness.namespace,
            "lease",
            "image-reflector-controller-leader-election",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    assert!(!lease.is_empty(), "the controller holds Flux's Lease");

    // A new tag is not seen before the interval, but is after a reconcile request.
    registry.push("team/app", &["3.0.0"]);
    ok(
        &[
            "annotate",
            "-n",
            &harness.namespace,
            "imagerepository/app",
            "--overwrite",
            "reconcile.fluxcd.io/requestedAt=first",
        ],
        None,
    );
    let repo = harness.wait_for("app", "the request handled", |o| {
        o["status"]["lastHandledReconcileAt"] == "first"
    });
    let want = ["3.0.0", "2.0.0", "1.1.0", "1.0.0"];
    // Flux's duration histogram counts every pass: the finalizer's and the first scan ended
    // before this request's pass wrote its status (which may not be counted yet).
    let timed = harness.reconciles_timed("ImageRepository", "app");
    assert!(
        timed >= 2,
        "{timed} passes timed in gotk_reconcile_duration_seconds"
    );
    assert_eq!(repo["status"]["lastScanResult"]["tagCount"], 4);
    assert_eq!(repo["status"]["lastScanResult"]["latestTags"], json!(want));
    assert_eq!(
        ready(&repo).unwrap()["message"],
        format!("successful scan: found 4 tags with checksum {}", checksum(&want))
    );

    // Deletion removes the tag file, then the finalizer lets the object go.
    let uid = repo["metadata"]["uid"].as_str().unwrap().to_string();
    let tag_dir = harness
        .storage
        .path()
        .join("data/imagerepository")
        .join(&harness.namespace)
        .join("app")
        .join(&uid);
    assert!(tag_dir.exists(), "{} holds the tags", tag_dir.display());
    ok(
        &[
            "delete",
            "-n",
            &harness.namespace,
            "imagerepository/app",
            "--timeout=60s",
        ],
        None,
    );
    assert!(!tag_dir.exists(), "the tags of a deleted object are removed");
}

#[test]
fn credentials_come_from_a_docker_config_secret() {
    let registry = Registry::start(Options {
        htpasswd: Some(("flux", "s3cret")),
        ..Options::default()
    });
    registry.push("private/app", &["v1", "v2"]);
    let harness = Harness::start("auth");
    let image = format!("{}/private/app", registry.host());
    harness.apply(image_repository(
        "private",
        &image,
        json!({"secretRef": {"name": "creds"}}),
    ));
    let repo = harness.wait_for("private", "AuthenticationFailed", |o| {
        ready_is(o, "False", "AuthenticationFailed")
    });
    assert_eq!(
        ready(&repo).unwrap()["message"],
        r#"failed to configure authentication options: secrets "creds" not found"#
    );
    assert_eq!(repo["status"]["conditions"][0]["type"], "Reconciling");
    assert_eq!(repo["status"]["conditions"][0]["reason"], "ProgressingWithRetry");

    let auth = base64::engine::general_purpose::STANDARD.encode("flux:s3cret");
    let config = json!({"auths": {registry.host(): {"auth": auth}}}).to_string();
    harness.apply(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "creds"},
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    }));
    // The retry with backoff finds the Secret.
    let repo = harness.wait_for("private", "Ready=True", |o| ready_is(o, "True", "Succeeded"));
    assert_eq!(
        repo["status"]["lastScanResult"]["latestTags"],
        json!(["v2", "v1"])
    );
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The Ready condition's message, empty before the controller has written one.
fn message(object: &Value) -> String {
    ready(object)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn scans_through_the_proxy_of_proxy_secret_ref() {
    let registry = Registry::start(Options::default());
    registry.push("behind/app", &["1.0.0", "1.2.0"]);
    let proxy = support::proxy::Proxy::start(Some(("tor", "onion")));
    let harness = Harness::start("proxy");
    let ns = harness.namespace.clone();
    let image = format!("{}/behind/app", registry.host());
    harness.apply(image_repository(
        "app",
        &image,
        json!({"proxySecretRef": {"name": "proxy"}}),
    ));
    let repo = harness.wait_for("app", "the missing Secret named", |o| {
        ready_is(o, "False", "AuthenticationFailed")
    });
    assert_eq!(
        message(&repo),
        format!("failed to configure authentication options: secret '{ns}/proxy' not found")
    );

    let secret = |data: Value| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "proxy"}, "data": data});
    harness.apply(secret(json!({"username": b64("tor")})));
    harness.wait_for("app", "the missing key named", |o| {
        message(o)
            == format!(
                "failed to configure authentication options: secret '{ns}/proxy': key 'address' not found"
            )
    });
    harness.apply(secret(json!({"address": b64("ftp://127.0.0.1:21")})));
    harness.wait_for("app", "the bad scheme named", |o| {
        message(o)
            .ends_with("proxy URL must use one of the supported schemes (http, https, socks5), got 'ftp'")
    });
    assert!(proxy.tunnels().is_empty(), "{:?}", proxy.tunnels());

    harness.apply(secret(json!({
        "address": b64(&format!("socks5://127.0.0.1:{}", proxy.port)),
        "username": b64("tor"),
        "password": b64("onion"),
    })));
    let repo = harness.wait_for("app", "Ready=True", |o| ready_is(o, "True", "Succeeded"));
    assert_eq!(
        repo["status"]["lastScanResult"]["latestTags"],
        json!(["1.2.0", "1.0.0"])
    );
    let through = format!("SOCKS5 {}", registry.host());
    assert!(proxy.tunnels().contains(&through), "{:?}", proxy.tunnels());
}

#[test]
fn credentials_come_from_the_service_accounts_image_pull_secrets() {
    let registry = Registry::start(Options {
        htpasswd: Some(("robot", "b33p")),
        ..Options::default()
    });
    registry.push("fleet/app", &["7", "8"]);
    let harness = Harness::start("sa");
    let ns = harness.namespace.clone();
    let image = format!("{}/fleet/app", registry.host());
    harness.apply(image_repository(
        "app",
        &image,
        json!({"serviceAccountName": "puller"}),
    ));
    harness.wait_for("app", "the missing ServiceAccount named", |o| {
        message(o)
            == format!("failed to configure authentication options: serviceaccount '{ns}/puller' not found")
    });
    harness.apply(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "puller"},
        "imagePullSecrets": [{"name": "other"}, {"name": "pull"}],
    }));
    harness.wait_for("app", "the missing pull secret named", |o| {
        message(o)
            == format!(
                "failed to configure authentication options: failed to get image pull secret \
                 for serviceaccount '{ns}/puller': secret '{ns}/other' not found"
            )
    });
    let docker_secret = |name: &str, host: &str, user_password: &str| {
        let config = json!({"auths": {host: {"auth": b64(user_password)}}}).to_string();
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name}, "data": {".dockerconfigjson": b64(&config)},
        })
    };
    // The first pull secret is for another registry; the keyring picks the second's entry.
    harness.apply(docker_secret("other", "ghcr.io", "someone:else"));
    harness.apply(docker_secret("pull", &registry.host(), "robot:b33p"));
    let repo = harness.wait_for("app", "Ready=True", |o| ready_is(o, "True", "Succeeded"));
    assert_eq!(repo["status"]["lastScanResult"]["latestTags"], json!(["8", "7"]));
}

#[test]
fn a_cloud_provider_stalls_naming_it() {
    let harness = Harness::start("provider");
    harness.apply(image_repository(
        "ecr",
        "012345678901.dkr.ecr.eu-west-1.amazonaws.com/app",
        json!({"provider": "aws"}),
    ));
    let repo = harness.wait_for("ecr", "Stalled", |o| {
        ready_is(o, "False", "InvalidProviderConfiguration")
    });
    let conditions = repo["status"]["conditions"].as_array().unwrap();
    let stalled = conditions.iter().find(|c| c["type"] == "Stalled").unwrap();
    assert_eq!(stalled["status"], "True");
    assert_eq!(stalled["reason"], "InvalidProviderConfiguration");
    assert!(
        message(&repo).starts_with("spec.provider 'aws' is not supported"),
        "{}",
        message(&repo)
    );
    assert_eq!(repo["status"]["observedGeneration"], 1);
    assert!(
        conditions.iter().all(|c| c["type"] != "Reconciling"),
        "a stalled object is not reconciling: {conditions:?}"
    );
}

/// `config/image-reflector/` applied for real (by kubectl's kustomize), and the controller run
/// as its ServiceAccount with Flux's args: the shipped RBAC is enough to scan with a
/// docker-config Secret and a ServiceAccount's pull secrets, write status, finalizer, events
/// and hold its Lease in flux-system.
#[test]
fn the_shipped_rbac_is_enough_to_scan_as_the_service_account() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/image-reflector");
    let _ = kubectl(&["create", "namespace", "flux-system"], None);
    // Everything but the Deployment (`app` label), which nothing here could run;
    // tests/integration/ship.rs validates it with the whole install.
    ok(&["apply", "-n", "flux-system", "-k", config, "-l", "!app"], None);
    // The admin's kubeconfig, acting as the shipped ServiceAccount.
    let raw = ok(&["config", "view", "--raw", "--minify"], None);
    let mut kubeconfig: Value = serde_yaml::from_str(&raw).unwrap();
    kubeconfig["users"][0]["user"]["as"] =
        json!("system:serviceaccount:flux-system:image-reflector-controller");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controller.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();

    let registry = Registry::start(Options {
        htpasswd: Some(("ship", "it")),
        ..Options::default()
    });
    registry.push("shipped/app", &["1.0.0", "1.0.1"]);
    // Flux's args watch every namespace: a label keeps this controller to this test's objects.
    let selector = format!("irc-install-test={}", std::process::id());
    let harness = Harness::start_as_flux("ship", &path, &[&format!("--watch-label-selector={selector}")]);
    let config = json!({"auths": {registry.host(): {"auth": b64("ship:it")}}}).to_string();
    harness.apply(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "pull"}, "data": {".dockerconfigjson": b64(&config)},
    }));
    harness.apply(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "puller"},
        "imagePullSecrets": [{"name": "pull"}],
    }));
    let (key, value) = selector.split_once('=').unwrap();
    for (name, extra) in [
        ("by-secret", json!({"secretRef": {"name": "pull"}})),
        ("by-sa", json!({"serviceAccountName": "puller"})),
    ] {
        let mut object = image_repository(name, &format!("{}/shipped/app", registry.host()), extra);
        object["metadata"]["labels"] = json!({ key: value });
        harness.apply(object);
    }
    for name in ["by-secret", "by-sa"] {
        let repo = harness.wait_for(name, "Ready=True", |o| ready_is(o, "True", "Succeeded"));
        assert_eq!(
            repo["status"]["lastScanResult"]["latestTags"],
            json!(["1.0.1", "1.0.0"])
        );
    }
    let events = ok(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            &harness.namespace,
            "-o",
            "json",
        ],
        None,
    );
    assert!(events.contains("successful scan"), "{events}");
    let leases = ok(&["get", "leases", "-n", "flux-system", "-o", "name"], None);
    assert!(
        leases.contains("image-reflector-controller-leader-election"),
        "{leases}"
    );
    assert!(
        !harness.log().contains("forbidden"),
        "the controller was refused something:\n{}",
        harness.log()
    );
}

/// The finalizer add works from a view of the object older than the server's: another writer
/// added its finalizer since (a test-then-add JSON patch alone answered 422 there), and a second
/// add from the same old view neither fails nor repeats the entry.
#[tokio::test]
async fn the_finalizer_is_added_from_a_stale_view() {
    use flux_runtime::finalizers::add as add_finalizer;
    use image_reflector::IMAGE_REPOSITORY;
    use image_reflector::api::{FINALIZER, ImageRepository};

    support::cluster::install_crds();
    let namespace = format!("irc-fin-{}", std::process::id());
    ok(&["create", "namespace", &namespace], None);
    let repo = image_repository("app", "ghcr.io/team/app", json!({}));
    ok(&["apply", "-n", &namespace, "-f", "-"], Some(&repo.to_string()));
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let api: kube::Api<ImageRepository> = kube::Api::namespaced(client, &namespace);
    let stale = api.get("app").await.unwrap();
    let other = r#"[{"op":"add","path":"/metadata/finalizers","value":["example.com/hold"]}]"#;
    ok(
        &[
            "patch",
            "-n",
            &namespace,
            "imagerepository/app",
            "--type=json",
            "-p",
            other,
        ],
        None,
    );

    let manager = IMAGE_REPOSITORY.field_manager;
    let added = add_finalizer(&api, &stale, FINALIZER, manager).await;
    let again = add_finalizer(&api, &stale, FINALIZER, manager).await;
    let finalizers = api.get("app").await.unwrap().metadata.finalizers;
    let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
    ok(
        &[
            "patch",
            "-n",
            &namespace,
            "imagerepository/app",
            "--type=merge",
            "-p",
            unfinalized,
        ],
        None,
    );
    let _ = kubectl(&["delete", "namespace", &namespace, "--wait=false"], None);
    assert!(added.is_ok(), "{added:?}");
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(
        finalizers,
        Some(vec![
            "example.com/hold".to_string(),
            "finalizers.fluxcd.io".to_string()
        ])
    );
}
