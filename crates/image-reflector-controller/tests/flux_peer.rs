//! Flux's own image-reflector-controller (built by `e2e/fluxirc/build.sh`, its directory in
//! `$E2E_FLUX_IRC_BIN`) runs on our CRDs unchanged, against a real registry: it scans an
//! ImageRepository, resolves a semver ImagePolicy, follows a new tag with the previous ref, and
//! reports an unchanged rescan as Flux does. This is the peer of the later differential suite;
//! the expected values come from the reference (`image-reflector.md` §1.7, §1.8), not from our
//! code.
//!
//! Needs the e2e control plane (`KUBECONFIG`, `E2E_BIN`), the peer and Debian's
//! docker-registry: `make test` runs it; a bare `cargo test` does not.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cluster::{install_crds, ok};
use support::flux_peer::{Peer, delete_namespace};
use test_support::registry::{Options, Registry};

const WAIT: Duration = Duration::from_secs(90);

/// A namespace of its own, deleted when the test ends.
struct Namespace(String);

impl Namespace {
    fn new() -> Self {
        let name = format!("irc-peer-{}", std::process::id());
        ok(&["create", "namespace", &name], None);
        Self(name)
    }

    fn apply(&self, object: &Value) {
        ok(&["apply", "-n", &self.0, "-f", "-"], Some(&object.to_string()));
    }

    fn get(&self, resource: &str) -> Value {
        serde_json::from_str(&ok(&["get", "-n", &self.0, resource, "-o", "json"], None)).unwrap()
    }

    /// (type, reason, message) of the events about `kind/name`, oldest first.
    fn events(&self, kind: &str, name: &str) -> Vec<(String, String, String)> {
        let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
        let list = serde_json::from_str::<Value>(&ok(
            &[
                "get",
                "events",
                "-n",
                &self.0,
                "--field-selector",
                &selector,
                "-o",
                "json",
            ],
            None,
        ))
        .unwrap();
        let mut events: Vec<_> = list["items"].as_array().unwrap().iter().collect();
        events.sort_by_key(|e| e["lastTimestamp"].as_str().unwrap_or("").to_string());
        let field = |e: &Value, f: &str| e[f].as_str().unwrap_or("").to_string();
        events
            .iter()
            .map(|e| (field(e, "type"), field(e, "reason"), field(e, "message")))
            .collect()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        delete_namespace(&self.0);
    }
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Polls `resource` until `done` holds; on timeout fails with the object and the peer's log.
fn wait_for(ns: &Namespace, peer: &Peer, resource: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + WAIT;
    loop {
        let object = ns.get(resource);
        if done(&object) {
            return object;
        }
        assert!(
            Instant::now() < until,
            "{resource}: {what} not within {WAIT:?}:\n{}\npeer log:\n{}",
            serde_json::to_string_pretty(&object["status"]).unwrap(),
            peer.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn ready_with(message: impl Fn(&str) -> bool) -> impl Fn(&Value) -> bool {
    move |object| {
        condition(object, "Ready").is_some_and(|c| {
            c["status"] == "True"
                && c["observedGeneration"] == object["metadata"]["generation"]
                && message(c["message"].as_str().unwrap_or(""))
        })
    }
}

/// Ready after a scan of `count` tags, with the scan's result written: Flux may patch the
/// condition and `lastScanResult` separately, and a read between the two saw no result.
fn scanned(count: usize) -> impl Fn(&Value) -> bool {
    move |object| {
        ready_with(|m| scan_checksum(m, count).is_some())(object)
            && object["status"]["lastScanResult"]["tagCount"] == count
    }
}

/// `successful scan: found <count> tags with checksum <n>` (§1.7), the checksum a decimal number
/// in Flux's messages; returns it.
fn scan_checksum(message: &str, count: usize) -> Option<&str> {
    let checksum = message.strip_prefix(&format!("successful scan: found {count} tags with checksum "))?;
    (!checksum.is_empty() && checksum.bytes().all(|b| b.is_ascii_digit())).then_some(checksum)
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[test]
fn flux_controller_reconciles_our_crds_against_a_real_registry() {
    install_crds();
    let registry = Registry::start(Options::default());
    // A signature tag too: the default exclusion list (`^.*\.sig$`) drops it.
    registry.push(
        "app",
        &[
            "0.9.0",
            "1.0.0",
            "1.2.0-rc.1",
            "1.5.0",
            "2.0.0",
            "latest",
            "sha256-0a1b.sig",
        ],
    );
    let ns = Namespace::new();
    let peer = Peer::start(&ns.0, &["--log-level=debug"]);
    let image = format!("{}/app", registry.host());

    // The repository suspended first: the policy finds it with no tags yet, which Flux reports
    // as a dependency to wait for.
    let repository = |suspend: bool| {
        json!({
            "apiVersion": "image.toolkit.fluxcd.io/v1",
            "kind": "ImageRepository",
            "metadata": {"name": "app"},
            "spec": {"image": image, "interval": "1h", "suspend": suspend},
        })
    };
    ns.apply(&repository(true));
    ns.apply(&json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1",
        "kind": "ImagePolicy",
        "metadata": {"name": "app"},
        "spec": {"imageRepositoryRef": {"name": "app"}, "policy": {"semver": {"range": ">=1.0.0 <2.0.0"}}},
    }));
    let waiting = "retrying in 30s error: no tags in database";
    let policy = wait_for(&ns, &peer, "imagepolicy/app", "waiting for tags", |p| {
        condition(p, "Ready").is_some_and(|c| c["status"] == "False" && c["message"] == waiting)
    });
    assert_eq!(
        condition(&policy, "Ready").unwrap()["reason"],
        "DependencyNotReady"
    );
    let reconciling = condition(&policy, "Reconciling").expect("Reconciling while waiting");
    assert_eq!(
        (
            &reconciling["status"],
            &reconciling["reason"],
            &reconciling["message"]
        ),
        (
            &json!("True"),
            &json!("ProgressingWithRetry"),
            &json!("processing object: new generation -1 -> 1")
        )
    );
    eprintln!("policy waiting for tags: {:#}", policy["status"]);
    eprintln!(
        "suspended repository: {:#}",
        ns.get("imagerepository/app")["status"]
    );
    ns.apply(&repository(false));

    let repo = wait_for(&ns, &peer, "imagerepository/app", "Ready with 6 tags", scanned(6));
    let ready = condition(&repo, "Ready").unwrap();
    assert_eq!(ready["reason"], "Succeeded");
    let scan = &repo["status"]["lastScanResult"];
    assert_eq!(scan["tagCount"], 6);
    // Descending byte order, the signature excluded.
    assert_eq!(
        strings(&scan["latestTags"]),
        ["latest", "2.0.0", "1.5.0", "1.2.0-rc.1", "1.0.0", "0.9.0"]
    );
    assert_eq!(repo["status"]["canonicalImageName"], image);
    assert_eq!(repo["metadata"]["finalizers"], json!(["finalizers.fluxcd.io"]));
    assert_eq!(strings(&repo["status"]["observedExclusionList"]), ["^.*\\.sig$"]);
    let first_checksum = scan_checksum(ready["message"].as_str().unwrap(), 6)
        .unwrap()
        .to_string();
    // The scan's revision is the checksum the message names.
    assert_eq!(scan["revision"], first_checksum.as_str());

    let resolved = format!("Latest image tag for {image} resolved to 1.5.0");
    let policy = wait_for(
        &ns,
        &peer,
        "imagepolicy/app",
        "Ready at 1.5.0",
        ready_with(|m| m == resolved),
    );
    assert_eq!(condition(&policy, "Ready").unwrap()["reason"], "Succeeded");
    assert_eq!(
        policy["status"]["latestRef"],
        json!({"name": image, "tag": "1.5.0"})
    );
    assert!(policy["status"].get("observedPreviousRef").is_none(), "{policy}");

    // A new tag in range, picked up on a requested scan: the policy names where it came from.
    registry.push("app", &["1.6.0"]);
    let request = |at: &str| {
        ok(
            &[
                "annotate",
                "-n",
                &ns.0,
                "--overwrite",
                "imagerepository/app",
                &format!("reconcile.fluxcd.io/requestedAt={at}"),
            ],
            None,
        )
    };
    request("first");
    let repo = wait_for(
        &ns,
        &peer,
        "imagerepository/app",
        "Ready with 7 tags and the request handled",
        // Flux may write the scan's condition before the handled request: wait for both.
        |o| scanned(7)(o) && o["status"]["lastHandledReconcileAt"] == "first",
    );
    assert_ne!(
        scan_checksum(condition(&repo, "Ready").unwrap()["message"].as_str().unwrap(), 7),
        Some(first_checksum.as_str())
    );
    let moved = format!("Latest image tag for {image} resolved to 1.6.0 (previously {image}:1.5.0)");
    let policy = wait_for(
        &ns,
        &peer,
        "imagepolicy/app",
        "Ready at 1.6.0",
        ready_with(|m| m == moved),
    );
    assert_eq!(
        policy["status"]["latestRef"],
        json!({"name": image, "tag": "1.6.0"})
    );
    assert_eq!(
        policy["status"]["observedPreviousRef"],
        json!({"name": image, "tag": "1.5.0"})
    );

    // A requested scan that finds the same tags: Ready unchanged, a trace event only.
    request("second");
    wait_for(
        &ns,
        &peer,
        "imagerepository/app",
        "the second request handled",
        |r| r["status"]["lastHandledReconcileAt"] == "second",
    );
    let until = Instant::now() + WAIT;
    let events = loop {
        let events = ns.events("ImageRepository", "app");
        if events
            .iter()
            .any(|(_, _, m)| m == "tags did not change, next scan in 1h0m0s")
            || Instant::now() > until
        {
            break events;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    eprintln!("ImageRepository events: {events:#?}");
    let policy_events = ns.events("ImagePolicy", "app");
    eprintln!("ImagePolicy events: {policy_events:#?}");
    let normal = |message: &str| ("Normal".to_string(), "Succeeded".to_string(), message.to_string());
    let first_ready = format!("successful scan: found 6 tags with checksum {first_checksum}");
    assert!(
        events.contains(&normal(&first_ready)),
        "{events:#?}\n{}",
        peer.log()
    );
    assert!(
        events.contains(&normal("tags did not change, next scan in 1h0m0s")),
        "{events:#?}"
    );
    let second_ready = condition(&repo, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(events.contains(&normal(&second_ready)), "{events:#?}");
    // One Normal event per change of the policy's result; the unchanged rescan adds none.
    let policy_normal: Vec<_> = policy_events
        .iter()
        .filter(|e| e.0 == "Normal")
        .cloned()
        .collect();
    assert_eq!(policy_normal, [normal(&resolved), normal(&moved)]);
    let warning = (
        "Warning".to_string(),
        "DependencyNotReady".to_string(),
        waiting.to_string(),
    );
    assert!(policy_events.contains(&warning), "{policy_events:#?}");
    assert!(
        events.iter().all(|(kind, _, _)| kind == "Normal"),
        "no repository failure on the way: {events:#?}"
    );
    eprintln!("repository: {:#}", ns.get("imagerepository/app")["status"]);
    eprintln!("policy: {:#}", ns.get("imagepolicy/app")["status"]);
    // Deleted while the peer runs: it removes its finalizer from both.
    ok(
        &[
            "delete",
            "-n",
            &ns.0,
            "imagepolicy/app",
            "imagerepository/app",
            "--timeout=60s",
        ],
        None,
    );
    let left = ok(
        &[
            "get",
            "-n",
            &ns.0,
            "imagepolicies,imagerepositories",
            "-o",
            "name",
        ],
        None,
    );
    assert_eq!(left, "", "deleted objects remain\n{}", peer.log());
    eprintln!("peer log:\n{}", peer.log());
    assert!(
        peer.storage().read_dir().unwrap().next().is_some(),
        "the peer stored its tags"
    );
}
