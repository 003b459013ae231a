//! The ImagePolicy controller in the binary, against a real API server and a real registry:
//! each policy kind picks its tag, a new tag moves `latestRef` and `observedPreviousRef` with
//! Flux's event, a rescan that found the same tags wakes no policy, a missing repository and
//! cross-namespace ACLs, digest reflection through its transitions, suspend and deletion, and
//! trace events recorded but not forwarded; and the real `flux` CLI on them (`E2E_FLUX_BIN`).
//!
//! Needs the e2e control plane (`KUBECONFIG`, and `E2E_BIN` for kubectl) and Debian's
//! docker-registry: `make test` runs it.

mod support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cluster::{Harness, ok, ready, ready_is};
use test_support::kubectl;
use test_support::registry::{Options, Registry};

fn image_repository(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
        "metadata": {"name": name}, "spec": {"image": image, "interval": "1h"},
    })
}

fn image_policy(name: &str, repository: Value, spec: Value) -> Value {
    let mut full = json!({"imageRepositoryRef": repository});
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
        "metadata": {"name": name}, "spec": full,
    })
}

fn policy_ready(harness: &Harness, name: &str, what: &str) -> Value {
    harness.wait_for_kind("imagepolicy", name, what, |o| {
        ready_is(o, "True", "Succeeded") && o["status"]["observedGeneration"] == o["metadata"]["generation"]
    })
}

fn message(object: &Value) -> String {
    ready(object).unwrap()["message"].as_str().unwrap().to_string()
}

fn annotate(harness: &Harness, object: &str, value: &str) {
    ok(
        &[
            "annotate",
            "-n",
            &harness.namespace,
            object,
            "--overwrite",
            &format!("reconcile.fluxcd.io/requestedAt={value}"),
        ],
        None,
    );
}

fn patch(harness: &Harness, object: &str, spec: Value) {
    ok(
        &[
            "patch",
            "-n",
            &harness.namespace,
            object,
            "--type=merge",
            "-p",
            &json!({ "spec": spec }).to_string(),
        ],
        None,
    );
}

/// The events about `kind/name` in the harness namespace: (type, reason, note), oldest first,
/// once per occurrence (a repeat is counted on the first Event's series, as Flux's recorder
/// counts it on the first).
fn events(namespace: &str, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let out = ok(
        &["get", "events.events.k8s.io", "-n", namespace, "-o", "json"],
        None,
    );
    let list: Value = serde_json::from_str(&out).unwrap();
    let mut found: Vec<(String, String, String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .flat_map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            let occurrences = e["series"]["count"].as_u64().unwrap_or(1) as usize;
            let event = (text("eventTime"), text("type"), text("reason"), text("note"));
            std::iter::repeat_n(event, occurrences)
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, t, r, n)| (t, r, n)).collect()
}

/// Waits until an event about the policy with this note was recorded.
fn wait_event(harness: &Harness, name: &str, note: &str) -> Vec<(String, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = events(&harness.namespace, "ImagePolicy", name);
        if seen.iter().any(|(_, _, n)| n == note) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "no event {note:?} for {name}; events: {seen:#?}\ncontroller log:\n{}",
            harness.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn each_policy_kind_picks_its_tag_and_follows_new_scans() {
    let registry = Registry::start(Options::default());
    registry.push("team/app", &["0.1.0", "1.0.0", "1.0.1", "1.1.0-alpha", "latest"]);
    registry.push("team/ubuntu", &["xenial", "yakkety", "zesty", "artful", "bionic"]);
    registry.push("team/builds", &["main-845d3a80-2", "main-3e32dc8a-100", "pr-1-9"]);
    let harness = Harness::start("kinds");
    let app = format!("{}/team/app", registry.host());
    for (name, image) in [
        ("app", app.clone()),
        ("ubuntu", format!("{}/team/ubuntu", registry.host())),
        ("builds", format!("{}/team/builds", registry.host())),
    ] {
        harness.apply(image_repository(name, &image));
    }
    harness.apply(image_policy(
        "semver",
        json!({"name": "app"}),
        json!({"policy": {"semver": {"range": "1.0.x"}}}),
    ));
    harness.apply(image_policy(
        "asc",
        json!({"name": "ubuntu"}),
        json!({"policy": {"alphabetical": {}}}),
    ));
    harness.apply(image_policy(
        "desc",
        json!({"name": "ubuntu"}),
        json!({"policy": {"alphabetical": {"order": "desc"}}}),
    ));
    harness.apply(image_policy(
        "numerical",
        json!({"name": "builds"}),
        json!({
            "policy": {"numerical": {"order": "asc"}},
            "filterTags": {"pattern": "^main-[a-f0-9]+-(?P<id>[0-9]+)$", "extract": "$id"},
        }),
    ));
    let ubuntu = format!("{}/team/ubuntu", registry.host());
    let builds = format!("{}/team/builds", registry.host());
    for (policy, image, tag) in [
        ("semver", app.as_str(), "1.0.1"),
        ("asc", ubuntu.as_str(), "zesty"),
        ("desc", ubuntu.as_str(), "artful"),
        ("numerical", builds.as_str(), "main-3e32dc8a-100"),
    ] {
        let object = policy_ready(&harness, policy, "Ready=True");
        assert_eq!(
            object["status"]["latestRef"],
            json!({"name": image, "tag": tag}),
            "{policy}"
        );
        assert_eq!(
            message(&object),
            format!("Latest image tag for {image} resolved to {tag}")
        );
        assert!(object["status"]["observedPreviousRef"].is_null(), "{object}");
        assert_eq!(object["metadata"]["finalizers"], json!(["finalizers.fluxcd.io"]));
        assert_eq!(
            object["status"]["conditions"].as_array().unwrap().len(),
            1,
            "{object}"
        );
    }
    let first = format!("Latest image tag for {app} resolved to 1.0.1");
    let seen = wait_event(&harness, "semver", &first);
    assert!(
        seen.contains(&("Normal".into(), "Succeeded".into(), first.clone())),
        "{seen:#?}"
    );

    // A new tag: the repository rescans on request, its revision moves, the policy follows.
    registry.push("team/app", &["1.0.2"]);
    annotate(&harness, "imagerepository/app", "one");
    let moved = format!("Latest image tag for {app} resolved to 1.0.2 (previously {app}:1.0.1)");
    let object = harness.wait_for_kind("imagepolicy", "semver", "the new tag", |o| {
        o["status"]["latestRef"]["tag"] == "1.0.2"
    });
    assert_eq!(
        object["status"]["observedPreviousRef"],
        json!({"name": app, "tag": "1.0.1"})
    );
    assert_eq!(message(&object), moved);
    wait_event(&harness, "semver", &moved);
    let transition = ready(&object).unwrap()["lastTransitionTime"].clone();

    // A rescan that finds the same tags keeps the revision: no policy evaluation, no event.
    let before = events(&harness.namespace, "ImagePolicy", "semver");
    annotate(&harness, "imagerepository/app", "two");
    harness.wait_for("app", "the second request handled", |o| {
        o["status"]["lastHandledReconcileAt"] == "two"
    });
    std::thread::sleep(Duration::from_secs(3));
    let object = harness.get("imagepolicy", "semver").unwrap();
    assert_eq!(ready(&object).unwrap()["lastTransitionTime"], transition);
    assert_eq!(events(&harness.namespace, "ImagePolicy", "semver"), before);
}

#[test]
fn a_missing_repository_is_waited_for() {
    let registry = Registry::start(Options::default());
    registry.push("team/late", &["1.0.0", "2.0.0"]);
    let harness = Harness::start("missing");
    harness.apply(image_policy(
        "late",
        json!({"name": "late"}),
        json!({"policy": {"semver": {"range": ">=1.0.0"}}}),
    ));
    // Between retries the progress write shows Reconciling=Progressing: wait for the result.
    let object = harness.wait_for_kind("imagepolicy", "late", "DependencyNotReady", |o| {
        ready_is(o, "False", "DependencyNotReady")
            && o["status"]["conditions"][0]["reason"] == "ProgressingWithRetry"
    });
    assert_eq!(
        message(&object),
        "failed to get the referred ImageRepository: referenced ImageRepository does not exist: \
         ImageRepository.image.toolkit.fluxcd.io \"late\" not found"
    );
    let reconciling = &object["status"]["conditions"][0];
    assert_eq!(
        (&reconciling["type"], &reconciling["reason"]),
        (&json!("Reconciling"), &json!("ProgressingWithRetry"))
    );
    let image = format!("{}/team/late", registry.host());
    harness.apply(image_repository("late", &image));
    let object = policy_ready(&harness, "late", "Ready after the repository's scan");
    assert_eq!(object["status"]["latestRef"]["tag"], "2.0.0");
    assert_eq!(object["status"]["conditions"].as_array().unwrap().len(), 1);
    // Flux's duration histogram counts the policy's passes too: the finalizer's and a retry
    // ended before the evaluation wrote Ready.
    let timed = harness.reconciles_timed("ImagePolicy", "late");
    assert!(
        timed >= 2,
        "{timed} passes timed in gotk_reconcile_duration_seconds"
    );
}

/// Flux reads an empty tag store again for about 5 s before it reports "no tags in database":
/// a policy evaluated while its repository has not stored its tags yet waits for them and
/// never shows Ready=False. Every version of the policy is read from a watch.
#[test]
fn a_policy_waits_briefly_for_tags_being_stored() {
    let registry = Registry::start(Options::default());
    registry.push("team/slow", &["1.0.0", "1.1.0"]);
    let harness = Harness::start("patient");
    let image = format!("{}/team/slow", registry.host());
    // Suspended: no scan, no tags, until the policy is being evaluated.
    let mut repository = image_repository("slow", &image);
    repository["spec"]["suspend"] = json!(true);
    harness.apply(repository);
    let mut watch = std::process::Command::new(test_support::kubectl_path())
        .args([
            "get",
            "imagepolicies",
            "-n",
            &harness.namespace,
            "-w",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    harness.apply(image_policy(
        "slow",
        json!({"name": "slow"}),
        json!({"policy": {"semver": {"range": "1.x"}}}),
    ));
    // The evaluation has begun (its progress write) and found no tags.
    harness.wait_for_kind("imagepolicy", "slow", "the evaluation under way", |o| {
        o["status"]["conditions"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    });
    patch(&harness, "imagerepository/slow", json!({"suspend": false}));
    let object = policy_ready(&harness, "slow", "Ready once the scan stored the tags");
    assert_eq!(object["status"]["latestRef"]["tag"], "1.1.0");
    let _ = watch.kill();
    let mut text = String::new();
    watch.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    let _ = watch.wait();
    let versions: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    assert!(versions.len() >= 2, "the watch saw {} versions", versions.len());
    let not_ready: Vec<&Value> = versions
        .iter()
        .filter_map(|v| ready(v).filter(|c| c["status"] == "False"))
        .collect();
    assert!(not_ready.is_empty(), "Ready=False on the way: {not_ready:#?}");
}

#[test]
fn cross_namespace_references_follow_the_acl() {
    let registry = Registry::start(Options::default());
    registry.push("team/shared", &["1.0.0", "1.2.0"]);
    // Every namespace, but only this test's objects: other tests run controllers of their own.
    let shard = format!("acl-{}", std::process::id());
    let selector = format!("--watch-label-selector=irc-test={shard}");
    let harness = Harness::start_with("acl", &["--watch-all-namespaces=true", &selector]);
    let consumer = format!("{}-apps", harness.namespace);
    ok(&["create", "namespace", &consumer], None);
    let image = format!("{}/team/shared", registry.host());
    let mut repository = image_repository("shared", &image);
    repository["metadata"]["labels"] = json!({"irc-test": shard});
    harness.apply(repository);
    let reference = json!({"name": "shared", "namespace": harness.namespace});
    let mut policy = image_policy(
        "shared",
        reference,
        json!({"policy": {"semver": {"range": "1.x"}}}),
    );
    policy["metadata"]["labels"] = json!({"irc-test": shard});
    ok(&["apply", "-n", &consumer, "-f", "-"], Some(&policy.to_string()));
    let in_consumer = |what: &str, check: &dyn Fn(&Value) -> bool| -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = kubectl(
                &["get", "-n", &consumer, "imagepolicy/shared", "-o", "json"],
                None,
            );
            let object: Option<Value> = out
                .status
                .success()
                .then(|| serde_json::from_slice(&out.stdout).unwrap());
            if let Some(object) = object.as_ref().filter(|o| check(o)) {
                return object.clone();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {object:#?}\n{}",
                harness.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let denied = in_consumer("AccessDenied", &|o| ready_is(o, "False", "AccessDenied"));
    assert_eq!(
        message(&denied),
        format!(
            "failed to get the referred ImageRepository: access denied: '{}/shared' can't be \
             accessed due to missing ACL labels on 'accessFrom'",
            harness.namespace
        )
    );
    patch(
        &harness,
        "imagerepository/shared",
        json!({"accessFrom": {"namespaceSelectors": [{"matchLabels": {"team": "other"}}]}}),
    );
    // The ACL is read on the policy's retry, as Flux does (it does not watch namespaces).
    let mismatch = format!(
        "failed to get the referred ImageRepository: access denied: '{}/shared' can't be accessed \
         due to ACL labels mismatch on namespace '{consumer}'",
        harness.namespace
    );
    in_consumer("the mismatch", &|o| {
        ready(o).is_some_and(|c| c["message"] == mismatch)
    });
    patch(
        &harness,
        "imagerepository/shared",
        json!({"accessFrom": {"namespaceSelectors": [
            {"matchLabels": {"kubernetes.io/metadata.name": consumer}}
        ]}}),
    );
    let allowed = in_consumer("Ready", &|o| ready_is(o, "True", "Succeeded"));
    assert_eq!(
        allowed["status"]["latestRef"],
        json!({"name": image, "tag": "1.2.0"})
    );
    // A new scan revision reaches the policy in the other namespace.
    registry.push("team/shared", &["1.3.0"]);
    annotate(&harness, "imagerepository/shared", "new-tag");
    in_consumer("the new tag", &|o| o["status"]["latestRef"]["tag"] == "1.3.0");
    let _ = kubectl(
        &[
            "delete",
            "imagepolicies",
            "--all",
            "-n",
            &consumer,
            "--timeout=30s",
        ],
        None,
    );
    let _ = kubectl(&["delete", "namespace", &consumer, "--wait=false"], None);
}

#[test]
fn no_cross_namespace_refs_blocks_other_namespaces() {
    let harness = Harness::start_with("nocross", &["--no-cross-namespace-refs"]);
    harness.apply(image_policy(
        "elsewhere",
        json!({"name": "shared", "namespace": "flux-system"}),
        json!({"policy": {"alphabetical": {}}}),
    ));
    let object = harness.wait_for_kind("imagepolicy", "elsewhere", "AccessDenied", |o| {
        ready_is(o, "False", "AccessDenied")
    });
    assert_eq!(
        message(&object),
        "failed to get the referred ImageRepository: cannot access \
         'ImageRepository/flux-system/shared', cross-namespace references have been blocked"
    );
}

#[test]
fn digest_reflection_follows_its_policy() {
    let registry = Registry::start(Options::default());
    let pushed = registry.push("team/digest", &["1.0.0"]);
    let first = pushed[0].1.clone();
    let harness = Harness::start("digest");
    let image = format!("{}/team/digest", registry.host());
    harness.apply(image_repository("digest", &image));
    let policy = |spec: Value| {
        let mut spec = spec;
        spec["policy"] = json!({"semver": {"range": "1.0.x"}});
        image_policy("digest", json!({"name": "digest"}), spec)
    };
    harness.apply(policy(json!({"digestReflectionPolicy": "Never"})));
    let object = policy_ready(&harness, "digest", "Never");
    assert_eq!(
        object["status"]["latestRef"],
        json!({"name": image, "tag": "1.0.0"})
    );

    harness.apply(policy(json!({"digestReflectionPolicy": "IfNotPresent"})));
    let object = harness.wait_for_kind("imagepolicy", "digest", "the digest", |o| {
        o["status"]["latestRef"]["digest"].is_string() && o["status"]["observedGeneration"] == 2
    });
    assert_eq!(object["status"]["latestRef"]["digest"], first);
    assert_eq!(
        object["status"]["observedPreviousRef"],
        json!({"name": image, "tag": "1.0.0"})
    );
    assert_eq!(
        message(&object),
        format!(
            "Latest image tag for {image} resolved to 1.0.0 with digest {first} (previously {image}:1.0.0)"
        )
    );

    // The tag moves to new content: IfNotPresent keeps the digest it has, Always fetches.
    let second = registry.push_salted("team/digest", "again", &["1.0.0"])[0]
        .1
        .clone();
    assert_ne!(first, second);
    annotate(&harness, "imagepolicy/digest", "keep");
    harness.wait_for_kind("imagepolicy", "digest", "the request handled", |o| {
        o["status"]["lastHandledReconcileAt"] == "keep"
    });
    let object = harness.get("imagepolicy", "digest").unwrap();
    assert_eq!(object["status"]["latestRef"]["digest"], first);

    harness.apply(policy(
        json!({"digestReflectionPolicy": "Always", "interval": "1s"}),
    ));
    let object = harness.wait_for_kind("imagepolicy", "digest", "the new digest", |o| {
        o["status"]["latestRef"]["digest"] == second.as_str()
    });
    assert_eq!(
        message(&object),
        format!(
            "Latest image tag for {image} resolved to 1.0.0 with digest {second} \
             (previously {image}:1.0.0@{first})"
        )
    );
    // Always re-reads every interval without a new scan.
    let third = registry.push_salted("team/digest", "third", &["1.0.0"])[0]
        .1
        .clone();
    harness.wait_for_kind("imagepolicy", "digest", "the third digest by interval", |o| {
        o["status"]["latestRef"]["digest"] == third.as_str()
    });

    harness.apply(policy(json!({"digestReflectionPolicy": "Never"})));
    let object = harness.wait_for_kind("imagepolicy", "digest", "no digest", |o| {
        o["status"]["latestRef"].get("digest").is_none() && o["status"]["observedGeneration"] == 4
    });
    assert_eq!(
        object["status"]["latestRef"],
        json!({"name": image, "tag": "1.0.0"})
    );
    assert_eq!(
        object["status"]["observedPreviousRef"],
        json!({"name": image, "tag": "1.0.0", "digest": third})
    );
}

#[test]
fn suspend_holds_the_policy_and_deletion_lets_it_go() {
    let registry = Registry::start(Options::default());
    registry.push("team/held", &["1.0.0"]);
    let harness = Harness::start("suspend");
    let image = format!("{}/team/held", registry.host());
    harness.apply(image_repository("held", &image));
    harness.wait_for("held", "scanned", |o| ready_is(o, "True", "Succeeded"));
    let policy = |suspend: bool| {
        image_policy(
            "held",
            json!({"name": "held"}),
            json!({"policy": {"semver": {"range": "1.x"}}, "suspend": suspend}),
        )
    };
    harness.apply(policy(true));
    let object = harness.wait_for_kind("imagepolicy", "held", "the finalizer", |o| {
        o["metadata"]["finalizers"] == json!(["finalizers.fluxcd.io"])
    });
    std::thread::sleep(Duration::from_secs(2));
    let object = harness.get("imagepolicy", "held").unwrap_or(object);
    assert!(object["status"]["conditions"].is_null(), "{object}");
    assert!(object["status"]["latestRef"].is_null(), "{object}");

    harness.apply(policy(false));
    let object = policy_ready(&harness, "held", "resumed");
    assert_eq!(object["status"]["latestRef"]["tag"], "1.0.0");

    // Suspended, a new scan revision changes nothing; resumed, the policy catches up.
    harness.apply(policy(true));
    registry.push("team/held", &["1.1.0"]);
    annotate(&harness, "imagerepository/held", "scan");
    harness.wait_for("held", "rescanned", |o| {
        o["status"]["lastScanResult"]["tagCount"] == 2
    });
    std::thread::sleep(Duration::from_secs(2));
    let object = harness.get("imagepolicy", "held").unwrap();
    assert_eq!(object["status"]["latestRef"]["tag"], "1.0.0");
    harness.apply(policy(false));
    harness.wait_for_kind("imagepolicy", "held", "caught up", |o| {
        o["status"]["latestRef"]["tag"] == "1.1.0"
    });

    ok(
        &[
            "delete",
            "-n",
            &harness.namespace,
            "imagepolicy/held",
            "--timeout=30s",
        ],
        None,
    );
    assert!(harness.get("imagepolicy", "held").is_none());
}

/// An HTTP receiver standing in for notification-controller: the bodies it was sent.
fn event_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}/", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let store = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(event) = serde_json::from_slice(&body)
            {
                store.lock().unwrap().push(event);
            }
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (address, received)
}

#[test]
fn unchanged_evaluations_are_traced_but_not_forwarded() {
    let registry = Registry::start(Options::default());
    registry.push("team/traced", &["1.0.0"]);
    let (address, received) = event_receiver();
    let harness = Harness::start_with("trace", &[&format!("--events-addr={address}")]);
    let image = format!("{}/team/traced", registry.host());
    harness.apply(image_repository("traced", &image));
    // Scanned first, so that the policy's first evaluation finds the tags.
    harness.wait_for("traced", "scanned", |o| ready_is(o, "True", "Succeeded"));
    harness.apply(image_policy(
        "traced",
        json!({"name": "traced"}),
        json!({"policy": {"semver": {"range": "1.x"}}}),
    ));
    policy_ready(&harness, "traced", "Ready");
    let resolved = format!("Latest image tag for {image} resolved to 1.0.0");
    wait_event(&harness, "traced", &resolved);

    // A request evaluates again to the same result: a trace event with the same message.
    annotate(&harness, "imagepolicy/traced", "again");
    let deadline = Instant::now() + Duration::from_secs(30);
    let recorded = loop {
        let recorded: Vec<_> = events(&harness.namespace, "ImagePolicy", "traced")
            .into_iter()
            .filter(|(_, _, note)| *note == resolved)
            .collect();
        if recorded.len() >= 2 || Instant::now() > deadline {
            break recorded;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(
        recorded,
        vec![("Normal".to_string(), "Succeeded".to_string(), resolved.clone()); 2],
        "the first resolution and the trace of the second are recorded\n{}",
        harness.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    let forwarded: Vec<Value> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "ImagePolicy")
        .cloned()
        .collect();
    assert_eq!(forwarded.len(), 1, "only the first is forwarded: {forwarded:#?}");
    assert_eq!(forwarded[0]["message"], resolved);
    assert_eq!(forwarded[0]["severity"], "info");
    assert_eq!(forwarded[0]["reportingController"], "image-reflector-controller");

    // The repository's rescan that found the same tags: Flux's trace event, not forwarded.
    annotate(&harness, "imagerepository/traced", "rescan");
    let unchanged = "tags did not change, next scan in 1h0m0s";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !events(&harness.namespace, "ImageRepository", "traced")
        .iter()
        .any(|(t, r, n)| (t.as_str(), r.as_str(), n.as_str()) == ("Normal", "Succeeded", unchanged))
    {
        assert!(
            Instant::now() < deadline,
            "no trace event for the rescan\n{}",
            harness.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(2));
    let forwarded = received.lock().unwrap();
    assert!(
        forwarded.iter().all(|e| e["message"] != unchanged),
        "{forwarded:#?}"
    );
    assert!(
        forwarded
            .iter()
            .any(|e| e["involvedObject"]["kind"] == "ImageRepository"),
        "the repository's first scan is forwarded: {forwarded:#?}"
    );
}

/// The real `flux` CLI (`E2E_FLUX_BIN`) on our objects: stdout and stderr, and whether it
/// exited 0.
fn flux(harness: &Harness, args: &[&str]) -> (bool, String) {
    let namespace = ["--namespace", harness.namespace.as_str()];
    let args: Vec<&str> = args.iter().copied().chain(namespace).collect();
    let out = test_support::flux(&args);
    (out.status.success(), test_support::flux_text(&out))
}

fn flux_ok(harness: &Harness, args: &[&str]) -> String {
    let (success, text) = flux(harness, args);
    assert!(
        success,
        "`flux {}` failed:\n{text}\n{}",
        args.join(" "),
        harness.log()
    );
    text
}

/// Column `header` of the row for `name` in a `flux get` table (tab-separated columns); with
/// several tables (`flux get images all`), the header above the row.
fn cell(text: &str, name: &str, header: &str) -> String {
    let columns = |line: &str| {
        line.split('\t')
            .map(str::trim)
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let mut headers = None;
    for line in text.lines() {
        let row = columns(line);
        if row[0] == "NAME" {
            headers = Some(row);
        } else if row[0] == name {
            let index = headers
                .as_ref()
                .and_then(|h| h.iter().position(|c| c == header))
                .unwrap_or_else(|| panic!("no {header} column above {name} in:\n{text}"));
            return row[index].clone();
        }
    }
    panic!("no row for {name} in:\n{text}")
}

#[test]
fn the_flux_cli_reads_and_drives_our_objects() {
    let registry = Registry::start(Options::default());
    registry.push("team/cli", &["1.0.0", "1.1.0"]);
    let harness = Harness::start("cli");
    let image = format!("{}/team/cli", registry.host());
    harness.apply(image_repository("cli", &image));
    harness.apply(image_policy(
        "cli",
        json!({"name": "cli"}),
        json!({"policy": {"semver": {"range": "1.x"}}}),
    ));
    let policy = policy_ready(&harness, "cli", "Ready");
    let repository = harness.get("imagerepository", "cli").unwrap();

    let text = flux_ok(&harness, &["get", "image", "repository"]);
    assert_eq!(cell(&text, "cli", "READY"), "True", "{text}");
    assert_eq!(cell(&text, "cli", "SUSPENDED"), "False", "{text}");
    assert_eq!(cell(&text, "cli", "MESSAGE"), message(&repository), "{text}");
    assert_eq!(
        cell(&text, "cli", "LAST SCAN"),
        repository["status"]["lastScanResult"]["scanTime"]
            .as_str()
            .unwrap(),
        "{text}"
    );
    let text = flux_ok(&harness, &["get", "image", "policy"]);
    assert_eq!(cell(&text, "cli", "IMAGE"), image, "{text}");
    assert_eq!(cell(&text, "cli", "TAG"), "1.1.0", "{text}");
    assert_eq!(cell(&text, "cli", "MESSAGE"), message(&policy), "{text}");
    let text = flux_ok(&harness, &["get", "images", "all"]);
    assert_eq!(cell(&text, "imagerepository/cli", "READY"), "True", "{text}");
    assert_eq!(cell(&text, "imagepolicy/cli", "TAG"), "1.1.0", "{text}");

    // `flux reconcile` waits for our controller to handle its request.
    registry.push("team/cli", &["1.2.0"]);
    let text = flux_ok(&harness, &["reconcile", "image", "repository", "cli"]);
    assert!(text.contains("scan fetched 3 tags"), "{text}");
    harness.wait_for_kind("imagepolicy", "cli", "the new tag", |o| {
        o["status"]["latestRef"]["tag"] == "1.2.0"
    });

    flux_ok(&harness, &["suspend", "image", "repository", "cli"]);
    let text = flux_ok(&harness, &["get", "image", "repository"]);
    assert_eq!(cell(&text, "cli", "SUSPENDED"), "True", "{text}");
    let text = flux_ok(&harness, &["resume", "image", "repository", "cli"]);
    assert!(
        text.contains("ImageRepository cli reconciliation completed"),
        "{text}"
    );
    let text = flux_ok(&harness, &["get", "images", "all"]);
    assert_eq!(cell(&text, "imagerepository/cli", "SUSPENDED"), "False", "{text}");
    assert_eq!(cell(&text, "imagepolicy/cli", "TAG"), "1.2.0", "{text}");
    assert_eq!(
        cell(&text, "imagepolicy/cli", "MESSAGE"),
        format!("Latest image tag for {image} resolved to 1.2.0 (previously {image}:1.1.0)"),
        "{text}"
    );
}
