//! Differential test: the same ImageRepositories and ImagePolicies in two namespaces, one
//! reconciled by Flux's own image-reflector-controller v1.2.0 (`E2E_FLUX_IRC_BIN`, from
//! `e2e/fluxirc/build.sh`), one by ours, against the same real registries; then every compared
//! field must be equal, except the differences listed in `INTENDED` (one table, a reason each).
//!
//! Compared per ImageRepository: conditions (type, status, reason, message), `latestTags`,
//! `tagCount`, `canonicalImageName`, `observedExclusionList`; per ImagePolicy: conditions,
//! `latestRef`, `observedPreviousRef`; per object: its events' distinct (type, reason, message)
//! in the order first seen (retries repeat them at each controller's own backoff, so their
//! count is not compared); per object its `managedFields` (manager, operation, subresource and
//! the fields owned). Times are not compared and namespaces are masked.
//!
//! Scenarios: a plain scan with the default exclusion list, a custom exclusion list, a
//! repository missing on the registry, 401 without credentials, a missing secretRef, a URL
//! scheme and a tag in the image, a suspended repository; semver, alphabetical (both orders) and
//! numerical policies, filterTags with extract (a match, a non-numeric value, no match, a bad
//! regex), an invalid semver range, a missing ImageRepository, a repository with no tags, digest
//! reflection and a suspended policy; a TLS registry trusted through `certSecretRef` (its CA,
//! and mutual TLS with a client certificate), the TLS registry reached through an HTTP
//! `CONNECT` proxy of `proxySecretRef` (with proxy credentials), Basic auth with the right and
//! wrong credentials in a `secretRef`; policies on repositories of another namespace (ACL
//! allowed by `accessFrom`, denied by a label mismatch and by a missing `accessFrom`); then a new
//! tag (`latestRef`, `observedPreviousRef`, the event), a rescan that finds the same tags, and
//! an edited exclusion list (a rescan, `observedExclusionList`).
//!
//! Both controllers watch every namespace, label-selected to this test's objects (the ACL
//! scenarios need a second namespace per side).
//!
//! Needs the e2e control plane (`KUBECONFIG`, `E2E_BIN`), the peer and Debian's
//! docker-registry: `make test` runs it.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use regex::Regex;
use serde_json::{Value, json};
use support::cluster::{Harness, ok};
use support::flux_peer::{Peer, delete_namespace};
use support::proxy::Proxy;
use test_support::registry::{Options, Registry};

/// A difference between Flux and us that is intended; applied to both sides before comparing.
struct Intended {
    /// `Kind/name field`; `*` as the name matches every object of the kind.
    field: &'static str,
    pattern: &'static str,
    replacement: &'static str,
    reason: &'static str,
}

/// THE table of intended differences. Everything not masked here must be identical.
const INTENDED: &[Intended] = &[
    Intended {
        field: "ImageRepository/* conditions",
        pattern: r"with checksum [0-9a-z:]+",
        replacement: "with checksum <checksum>",
        reason: "Flux's Badger store names a decimal adler32 checksum of the tag list; our \
                 per-object file store names a sha256: revision (reference §4.4, FluxStorage)",
    },
    Intended {
        field: "ImageRepository/* events",
        pattern: r"with checksum [0-9a-z:]+",
        replacement: "with checksum <checksum>",
        reason: "the Ready message is the event's message: same checksum format as above",
    },
];

const USER: (&str, &str) = ("alice", "wonderland");
const PROXY_USER: (&str, &str) = ("mole", "tunnel");
/// The label both controllers select on (`--watch-label-selector`), valued with the pid.
const SHARD: &str = "irc-diff";
/// The label of the policies' namespaces that `accessFrom` selects on.
const TEAM: &str = "irc-diff-team";

/// The registries of the scenarios.
struct Registries {
    plain: Registry,
    auth: Registry,
    tls: Registry,
    mtls: Registry,
}

/// (kind, name, object) of the scenarios, the same in both namespaces.
fn scenarios(registries: &Registries, acl: &str) -> Vec<(&'static str, &'static str, Value)> {
    let Registries {
        plain,
        auth,
        tls,
        mtls,
    } = registries;
    let host = plain.host();
    let repo = |name: &'static str, spec: Value| {
        let value = json!({
            "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
            "metadata": {"name": name}, "spec": spec,
        });
        ("ImageRepository", name, value)
    };
    let policy = |name: &'static str, repository: &str, policy: Value, filter: Option<Value>| {
        let mut spec = json!({"imageRepositoryRef": {"name": repository}, "policy": policy});
        if let Some(filter) = filter {
            spec["filterTags"] = filter;
        }
        let value = json!({
            "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
            "metadata": {"name": name}, "spec": spec,
        });
        ("ImagePolicy", name, value)
    };
    let mut digest = policy("digest", "app", json!({"semver": {"range": "1.0.x"}}), None);
    digest.2["spec"]["digestReflectionPolicy"] = json!("IfNotPresent");
    let mut held = policy("held", "ubuntu", json!({"alphabetical": {}}), None);
    held.2["spec"]["suspend"] = json!(true);
    // Applied in this order: each policy after its repository, or a controller may see the
    // policy before the repository exists (a race, not a difference).
    vec![
        // A plain scan, with a signature tag the default exclusion list drops.
        repo(
            "app",
            json!({"image": format!("{host}/team/app"), "interval": "1h"}),
        ),
        // A custom exclusion list replaces the default one.
        repo(
            "excl",
            json!({"image": format!("{host}/team/excl"), "interval": "1h",
                   "exclusionList": ["^.*\\-alpha$"]}),
        ),
        repo(
            "ubuntu",
            json!({"image": format!("{host}/team/ubuntu"), "interval": "1h"}),
        ),
        repo(
            "builds",
            json!({"image": format!("{host}/team/builds"), "interval": "1h"}),
        ),
        // Not on the registry.
        repo(
            "absent",
            json!({"image": format!("{host}/team/nothing"), "interval": "1h"}),
        ),
        // Basic auth, no credentials: 401.
        repo(
            "unauth",
            json!({"image": format!("{}/team/secret", auth.host()), "interval": "1h"}),
        ),
        repo(
            "suspended",
            json!({"image": format!("{host}/team/app"), "interval": "1h", "suspend": true}),
        ),
        // Stalled on the spec: a URL scheme, a tag in the image.
        repo(
            "scheme",
            json!({"image": format!("https://{host}/team/app"), "interval": "1h"}),
        ),
        repo(
            "tagged",
            json!({"image": format!("{host}/team/app:1.0.0"), "interval": "1h"}),
        ),
        // A secretRef that does not exist.
        repo(
            "no-secret",
            json!({"image": format!("{}/team/secret", auth.host()), "interval": "1h",
                   "secretRef": {"name": "absent"}}),
        ),
        // Basic auth with the right and the wrong credentials.
        repo(
            "authed",
            json!({"image": format!("{}/team/secret", auth.host()), "interval": "1h",
                   "secretRef": {"name": "creds"}}),
        ),
        repo(
            "bad-creds",
            json!({"image": format!("{}/team/secret", auth.host()), "interval": "1h",
                   "secretRef": {"name": "wrong-creds"}}),
        ),
        // TLS: the registry's CA; mutual TLS: the CA and a client certificate.
        repo(
            "tls-ca",
            json!({"image": format!("{}/team/tls", tls.host()), "interval": "1h",
                   "certSecretRef": {"name": "ca"}}),
        ),
        repo(
            "mtls",
            json!({"image": format!("{}/team/mtls", mtls.host()), "interval": "1h",
                   "certSecretRef": {"name": "client-cert"}}),
        ),
        // Through the proxy (HTTPS, so both tunnel with CONNECT), with the CA.
        repo(
            "proxied",
            json!({"image": format!("{}/team/tls", tls.host()), "interval": "1h",
                   "certSecretRef": {"name": "ca"}, "proxySecretRef": {"name": "proxy"}}),
        ),
        policy("semver", "app", json!({"semver": {"range": "1.0.x"}}), None),
        policy("asc", "ubuntu", json!({"alphabetical": {"order": "asc"}}), None),
        policy("desc", "ubuntu", json!({"alphabetical": {"order": "desc"}}), None),
        policy(
            "numerical",
            "builds",
            json!({"numerical": {"order": "asc"}}),
            Some(json!({"pattern": "^main-[a-f0-9]+-(?P<id>[0-9]+)$", "extract": "$id"})),
        ),
        policy(
            "not-numeric",
            "builds",
            json!({"numerical": {"order": "asc"}}),
            // One tag only: with two, Flux names whichever its map iteration meets first.
            Some(json!({"pattern": "^main-(?P<sha>[a-f0-9]+)-2$", "extract": "$sha"})),
        ),
        policy(
            "no-match",
            "builds",
            json!({"numerical": {"order": "asc"}}),
            Some(json!({"pattern": "^release-(?P<id>[0-9]+)$", "extract": "$id"})),
        ),
        policy(
            "bad-regex",
            "builds",
            json!({"numerical": {"order": "asc"}}),
            Some(json!({"pattern": "^main-(", "extract": "$1"})),
        ),
        policy("bad-range", "app", json!({"semver": {"range": "*-*"}}), None),
        policy("no-repo", "missing", json!({"semver": {"range": "1.0.x"}}), None),
        policy("on-absent", "absent", json!({"semver": {"range": "1.0.x"}}), None),
        digest,
        held,
        // Repositories in the `acl` namespace (see `acl_repositories`).
        cross("acl-allowed", acl, "open"),
        cross("acl-mismatch", acl, "closed"),
        cross("acl-missing", acl, "private"),
        policy("on-mtls", "mtls", json!({"alphabetical": {}}), None),
    ]
}

/// A semver policy on the repository `repository` of namespace `namespace`.
fn cross(name: &'static str, namespace: &str, repository: &str) -> (&'static str, &'static str, Value) {
    let value = json!({
        "apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImagePolicy",
        "metadata": {"name": name},
        "spec": {"imageRepositoryRef": {"name": repository, "namespace": namespace},
                 "policy": {"semver": {"range": "1.x"}}},
    });
    ("ImagePolicy", name, value)
}

/// The repositories the cross-namespace policies refer to: one whose `accessFrom` selects the
/// policies' namespace, one that selects another team, one without `accessFrom`.
fn acl_repositories(plain: &Registry) -> Vec<Value> {
    let image = format!("{}/team/app", plain.host());
    let selector = |team: &str| json!({"namespaceSelectors": [{"matchLabels": {TEAM: team}}]});
    [
        ("open", Some(selector("apps"))),
        ("closed", Some(selector("other"))),
        ("private", None),
    ]
    .into_iter()
    .map(|(name, access)| {
        let mut spec = json!({"image": image, "interval": "1h"});
        if let Some(access) = access {
            spec["accessFrom"] = access;
        }
        json!({"apiVersion": "image.toolkit.fluxcd.io/v1", "kind": "ImageRepository",
               "metadata": {"name": name}, "spec": spec})
    })
    .collect()
}

/// The Secrets of the scenarios in one namespace; `proxy` is that side's proxy port.
fn secrets(registries: &Registries, proxy: u16) -> Vec<Value> {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let docker_config = |password: &str| {
        let auth = b64(format!("{}:{password}", USER.0).as_bytes());
        let config = json!({"auths": {registries.auth.host(): {"auth": auth}}}).to_string();
        b64(config.as_bytes())
    };
    let secret = |name: &str, type_: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
               "metadata": {"name": name}, "data": data})
    };
    let config_type = "kubernetes.io/dockerconfigjson";
    let (cert, key) = registries.mtls.client_pem();
    vec![
        secret(
            "creds",
            config_type,
            json!({".dockerconfigjson": docker_config(USER.1)}),
        ),
        secret(
            "wrong-creds",
            config_type,
            json!({".dockerconfigjson": docker_config("guess")}),
        ),
        secret("ca", "Opaque", json!({"ca.crt": b64(&registries.tls.ca_pem())})),
        secret(
            "client-cert",
            "Opaque",
            json!({"ca.crt": b64(&registries.mtls.ca_pem()), "tls.crt": b64(&cert),
                   "tls.key": b64(&key)}),
        ),
        secret(
            "proxy",
            "Opaque",
            json!({"address": b64(format!("http://127.0.0.1:{proxy}").as_bytes()),
                   "username": b64(PROXY_USER.0.as_bytes()),
                   "password": b64(PROXY_USER.1.as_bytes())}),
        ),
    ]
}

/// `object` with the shard label both controllers select on.
fn labelled(mut object: Value, shard: &str) -> Value {
    object["metadata"]["labels"] = json!({SHARD: shard});
    object
}

/// The namespace Flux's controller watches; after a failure nobody removes Flux's finalizers,
/// so they go before the namespace.
struct FluxNamespace(String);

impl Drop for FluxNamespace {
    fn drop(&mut self) {
        delete_namespace(&self.0);
    }
}

/// `Kind/name field` -> the field's value, namespace masked; before the `INTENDED` masks.
type Snapshot = BTreeMap<String, Value>;

fn snapshot(namespace: &str, list: &Value) -> Snapshot {
    let mut fields = Snapshot::new();
    for object in list["items"].as_array().unwrap() {
        let id = format!(
            "{}/{}",
            object["kind"].as_str().unwrap(),
            object["metadata"]["name"].as_str().unwrap()
        );
        let status = &object["status"];
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| json!([c["type"], c["status"], c["reason"], c["message"]]))
            .collect();
        conditions.sort_by_key(|c| c[0].to_string());
        fields.insert(format!("{id} conditions"), json!(conditions));
        fields.insert(format!("{id} managedFields"), managed_fields(&object["metadata"]));
        let names: &[&str] = if object["kind"] == "ImageRepository" {
            &[
                "lastScanResult.latestTags",
                "lastScanResult.tagCount",
                "canonicalImageName",
                "observedExclusionList",
            ]
        } else {
            &["latestRef", "observedPreviousRef"]
        };
        for name in names {
            let value = name.split('.').fold(status, |v, part| &v[part]);
            fields.insert(format!("{id} {name}"), value.clone());
        }
        fields.insert(format!("{id} events"), json!([]));
    }
    let events: Value = serde_json::from_str(&ok(
        &["get", "events.events.k8s.io", "-n", namespace, "-o", "json"],
        None,
    ))
    .unwrap();
    let mut seen: Vec<(String, String, Value)> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            // Flux's recorder fills the deprecated second-precision fields, ours eventTime.
            let when = e["eventTime"]
                .as_str()
                .or(e["deprecatedFirstTimestamp"].as_str())
                .unwrap_or_default()
                .to_string();
            let id = format!(
                "{}/{} events",
                e["regarding"]["kind"].as_str().unwrap_or_default(),
                e["regarding"]["name"].as_str().unwrap_or_default()
            );
            (when, id, json!([e["type"], e["reason"], e["note"]]))
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, id, event) in seen {
        let list = fields.entry(id).or_insert_with(|| json!([]));
        if !list.as_array().unwrap().contains(&event) {
            list.as_array_mut().unwrap().push(event);
        }
    }
    let text = serde_json::to_string(&fields).unwrap().replace(namespace, "<ns>");
    serde_json::from_str(&text).unwrap()
}

/// Who owns which fields of the object (manager, operation, subresource, fields), in a fixed
/// order and without times: a swap must not change them, or field managers that key on the
/// controller's name (`kubectl apply --force-conflicts`, policy engines) see another owner.
fn managed_fields(metadata: &Value) -> Value {
    let mut entries: Vec<Value> = metadata["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| json!([m["manager"], m["operation"], m["subresource"], m["fieldsV1"]]))
        .collect();
    entries.sort_by_key(|e| e.to_string());
    json!(entries)
}

/// The value with the `INTENDED` masks of its field applied.
fn intended(field: &str, value: &Value) -> Value {
    let (object, name) = field.split_once(' ').unwrap();
    let kind = object.split('/').next().unwrap();
    let mut text = serde_json::to_string(value).unwrap();
    for entry in INTENDED {
        let (pattern_object, pattern_name) = entry.field.split_once(' ').unwrap();
        let matches =
            pattern_name == name && (pattern_object == object || pattern_object == format!("{kind}/*"));
        if matches {
            text = Regex::new(entry.pattern)
                .unwrap()
                .replace_all(&text, entry.replacement)
                .into_owned();
        }
    }
    serde_json::from_str(&text).unwrap()
}

/// Every object settled: Ready decided for its generation and no pass under way (the suspended
/// one has no status).
fn settled(list: &Value, extra: &dyn Fn(&Value) -> bool) -> bool {
    list["items"].as_array().unwrap().iter().all(|o| {
        if o["spec"]["suspend"] == true {
            return true;
        }
        let ready = o["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
        // Reconciling=True with reason Progressing is a pass under way (a failing object's
        // retry passes through it and rests at ProgressingWithRetry).
        let running = o["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Reconciling" && c["reason"] == "Progressing")
        });
        // The condition's generation: a failing object's status keeps its old one.
        ready.is_some_and(|r| {
            r["status"] != "Unknown" && r["observedGeneration"] == o["metadata"]["generation"]
        }) && !running
            && extra(o)
    })
}

/// Waits until every object of the namespaces settled.
fn settle(namespaces: &[&String], peer: &Peer, harness: &Harness) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !namespaces.iter().all(|n| observe(n, &|_| true).1) {
        assert!(
            Instant::now() < deadline,
            "not settled within 120s\nour log:\n{}\npeer log:\n{}",
            harness.log(),
            peer.log()
        );
        std::thread::sleep(Duration::from_millis(1000));
    }
}

/// The namespace's ImageRepositories and ImagePolicies: its snapshot, and whether it settled.
fn observe(namespace: &str, extra: &dyn Fn(&Value) -> bool) -> (Snapshot, bool) {
    let kinds = "imagerepositories,imagepolicies";
    // kubectl leaves managedFields out unless asked.
    let args = [
        "get",
        "-n",
        namespace,
        kinds,
        "-o",
        "json",
        "--show-managed-fields",
    ];
    let list = ok(&args, None);
    let list: Value = serde_json::from_str(&list).unwrap();
    (snapshot(namespace, &list), settled(&list, extra))
}

/// Waits until both namespaces are settled and their snapshots are the same at two settled
/// polls in a row (a failing object's retry in between, a pass under way, does not count).
fn stable(
    ours: &str,
    flux: &str,
    peer: &Peer,
    harness: &Harness,
    extra: &dyn Fn(&Value) -> bool,
) -> (Snapshot, Snapshot) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last: Option<(Snapshot, Snapshot)> = None;
    loop {
        let ((our_snapshot, our_settled), (flux_snapshot, flux_settled)) =
            (observe(ours, extra), observe(flux, extra));
        let now = (our_snapshot, flux_snapshot);
        if our_settled && flux_settled {
            if last.as_ref() == Some(&now) {
                return now;
            }
            last = Some(now.clone());
        }
        assert!(
            Instant::now() < deadline,
            "not settled within 120s:\nours: {:#}\nflux: {:#}\nour log:\n{}\npeer log:\n{}",
            json!(now.0),
            json!(now.1),
            harness.log(),
            peer.log()
        );
        std::thread::sleep(Duration::from_millis(1500));
    }
}

#[derive(Default)]
struct Tally {
    compared: usize,
    identical: usize,
    intended: usize,
    differences: Vec<String>,
}

fn compare(tally: &mut Tally, step: &str, ours: &Snapshot, flux: &Snapshot) {
    let fields: std::collections::BTreeSet<&String> = ours.keys().chain(flux.keys()).collect();
    for field in fields {
        let (a, b) = (
            ours.get(field).unwrap_or(&Value::Null),
            flux.get(field).unwrap_or(&Value::Null),
        );
        tally.compared += 1;
        if a == b {
            tally.identical += 1;
        } else if intended(field, a) == intended(field, b) {
            tally.intended += 1;
        } else {
            tally.differences.push(format!(
                "{step}: {field}\n  ours: {}\n  flux: {}",
                intended(field, a),
                intended(field, b)
            ));
        }
    }
}

fn as_strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

fn request_scan(namespace: &str, object: &str, at: &str) {
    ok(
        &[
            "annotate",
            "-n",
            namespace,
            "--overwrite",
            object,
            &format!("reconcile.fluxcd.io/requestedAt={at}"),
        ],
        None,
    );
}

#[test]
fn flux_and_ours_agree_on_the_same_objects() {
    let began = Instant::now();
    let registries = Registries {
        plain: Registry::start(Options::default()),
        auth: Registry::start(Options {
            htpasswd: Some(USER),
            ..Options::default()
        }),
        tls: Registry::start(Options {
            tls: true,
            ..Options::default()
        }),
        mtls: Registry::start(Options {
            tls: true,
            mtls: true,
            ..Options::default()
        }),
    };
    let plain = &registries.plain;
    plain.push(
        "team/app",
        &["0.1.0", "1.0.0", "1.0.1", "1.1.0-alpha", "latest", "1.0.1.sig"],
    );
    plain.push(
        "team/excl",
        &["0.1.0", "0.1.1-alpha", "0.1.1", "0.1.1.sig", "1.0.0-alpha"],
    );
    plain.push("team/ubuntu", &["xenial", "yakkety", "zesty", "artful", "bionic"]);
    plain.push("team/builds", &["main-845d3a80-2", "main-3e32dc8a-100", "pr-1-9"]);
    registries.auth.push("team/secret", &["1.0.0"]);
    registries.tls.push("team/tls", &["2.0.0", "2.1.0"]);
    registries.mtls.push("team/mtls", &["alpha", "beta"]);
    // One proxy per side, so each proves its own controller tunnelled.
    let (our_proxy, flux_proxy) = (Proxy::start(Some(PROXY_USER)), Proxy::start(Some(PROXY_USER)));

    // Every namespace, only this side's objects: other tests run controllers of their own,
    // and each controller here must leave the other's alone.
    let shards = [
        format!("ours-{}", std::process::id()),
        format!("flux-{}", std::process::id()),
    ];
    // The same retry bounds on both sides; failing objects retry at most every 10 s, so that
    // a poll rarely meets one of the dozen of them in the middle of a retry.
    let flags = |shard: &str| {
        let selector = format!("--watch-label-selector={SHARD}={shard}");
        let scope = ["--watch-all-namespaces=true".to_string(), selector];
        let retries = ["--min-retry-delay=200ms", "--max-retry-delay=10s"];
        retries
            .map(String::from)
            .into_iter()
            .chain(scope)
            .collect::<Vec<_>>()
    };
    let [our_flags, flux_flags] = [flags(&shards[0]), flags(&shards[1])];
    let harness = Harness::start_with("diff", &as_strs(&our_flags));
    let flux = FluxNamespace(format!("irc-diff-flux-{}", std::process::id()));
    ok(&["create", "namespace", &flux.0], None);
    // The repositories of the cross-namespace policies, in a second namespace per side.
    let acl = [
        FluxNamespace(format!("{}-acl", harness.namespace)),
        FluxNamespace(format!("{}-acl", flux.0)),
    ];
    for namespace in [&harness.namespace, &flux.0] {
        ok(&["label", "namespace", namespace, &format!("{TEAM}=apps")], None);
    }
    let peer = Peer::start(&flux.0, &as_strs(&flux_flags));
    let sides = [
        (&harness.namespace, &acl[0].0, &our_proxy, &shards[0]),
        (&flux.0, &acl[1].0, &flux_proxy, &shards[1]),
    ];
    // One kubectl apply per namespace and kind: it applies a List's items in order.
    let apply = |namespace: &str, items: Vec<Value>| {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        ok(&["apply", "-n", namespace, "-f", "-"], Some(&list.to_string()));
    };
    let mut policies = Vec::new();
    for (namespace, acl, proxy, shard) in sides {
        ok(&["create", "namespace", acl], None);
        let repositories = acl_repositories(plain);
        apply(
            acl,
            repositories.into_iter().map(|o| labelled(o, shard)).collect(),
        );
        let (repositories, rest): (Vec<_>, Vec<_>) = scenarios(&registries, acl)
            .into_iter()
            .partition(|(kind, _, _)| *kind == "ImageRepository");
        let mut items = secrets(&registries, proxy.port);
        items.extend(repositories.into_iter().map(|(_, _, o)| labelled(o, shard)));
        apply(namespace, items);
        policies.push((
            namespace,
            rest.into_iter()
                .map(|(_, _, o)| labelled(o, shard))
                .collect::<Vec<_>>(),
        ));
    }
    // The policies once every repository has scanned (or failed to): else a controller may
    // evaluate a policy before its repository's first scan stored tags, a race of timing
    // (Flux then reports "no tags in database" after its re-reads), not a difference.
    let namespaces = [&harness.namespace, &flux.0, &acl[0].0, &acl[1].0];
    settle(&namespaces, &peer, &harness);
    let count = scenarios(&registries, "").len();
    for (namespace, items) in policies {
        apply(namespace, items);
    }
    let applied = began.elapsed();

    let mut tally = Tally::default();
    let (ours, theirs) = stable(&harness.namespace, &flux.0, &peer, &harness, &|_| true);
    compare(&mut tally, "first scan", &ours, &theirs);
    let first = began.elapsed();

    // A new tag in range, picked up on a requested scan in both namespaces; a rescan that
    // finds the same tags; and an edited exclusion list, which rescans on its own.
    plain.push("team/app", &["1.0.2"]);
    let exclusions = json!({"spec": {"exclusionList": ["^.*\\.sig$", "^0\\..*$"]}});
    for namespace in [&harness.namespace, &flux.0] {
        request_scan(namespace, "imagerepository/app", "new-tag");
        request_scan(namespace, "imagerepository/ubuntu", "same-tags");
        let patch = exclusions.to_string();
        let args = [
            "patch",
            "-n",
            namespace,
            "imagerepository/excl",
            "--type=merge",
            "-p",
            &patch,
        ];
        ok(&args, None);
    }
    let moved = |o: &Value| match o["metadata"]["name"].as_str() {
        Some("semver") => o["status"]["latestRef"]["tag"] == "1.0.2",
        Some("ubuntu") => o["status"]["lastHandledReconcileAt"] == "same-tags",
        Some("excl") => o["status"]["observedExclusionList"] == exclusions["spec"]["exclusionList"],
        _ => true,
    };
    let (ours, theirs) = stable(&harness.namespace, &flux.0, &peer, &harness, &moved);
    compare(&mut tally, "new tag", &ours, &theirs);
    // The comparison covered what the steps were for (texts from the reference, §3.2 5 and 20).
    let app = format!("{}/team/app", plain.host());
    let expected = [
        (
            "ImagePolicy/semver events",
            format!("Latest image tag for {app} resolved to 1.0.2 (previously {app}:1.0.1)"),
        ),
        (
            "ImageRepository/ubuntu events",
            "tags did not change, next scan in 1h0m0s".to_string(),
        ),
    ];
    for (field, note) in expected {
        let seen = theirs[field].as_array().unwrap();
        assert!(
            seen.iter().any(|e| e[2] == note.as_str()),
            "{field}: no {note:?} in {seen:?}"
        );
    }
    // Flux itself got where each scenario was meant to go (or both sides could agree on a
    // failure the scenario did not intend).
    let ready = |object: &str| theirs[&format!("{object} conditions")].to_string();
    for object in [
        "ImageRepository/authed",
        "ImageRepository/tls-ca",
        "ImageRepository/mtls",
        "ImageRepository/proxied",
        "ImagePolicy/on-mtls",
        "ImagePolicy/acl-allowed",
    ] {
        assert!(
            ready(object).contains(r#"["Ready","True","Succeeded""#),
            "{object}: {}",
            ready(object)
        );
    }
    assert!(
        ready("ImageRepository/bad-creds").contains("UNAUTHORIZED"),
        "{}",
        ready("ImageRepository/bad-creds")
    );
    for object in ["ImagePolicy/acl-mismatch", "ImagePolicy/acl-missing"] {
        assert!(
            ready(object).contains("AccessDenied"),
            "{object}: {}",
            ready(object)
        );
    }
    assert_eq!(theirs["ImageRepository/excl lastScanResult.tagCount"], 1);
    // The owners were compared, not two empty lists: Flux wrote status and a finalizer.
    for object in ["ImageRepository/app", "ImagePolicy/semver"] {
        let owners = theirs[&format!("{object} managedFields")].to_string();
        assert!(
            owners.contains(r#""status""#) && owners.contains("f:finalizers"),
            "{object}: {owners}"
        );
    }
    for (side, proxy) in [("ours", &our_proxy), ("flux", &flux_proxy)] {
        let through = format!("CONNECT {}", registries.tls.host());
        assert!(
            proxy.tunnels().contains(&through),
            "{side}: {:?}",
            proxy.tunnels()
        );
    }

    eprintln!(
        "differential: {} scenarios, {} fields compared, {} identical, {} intended differences \
         ({} table entries), {} unexpected, in {:.0?} (policies applied at {:.0?}, first scan settled at \
         {:.0?})",
        count,
        tally.compared,
        tally.identical,
        tally.intended,
        INTENDED.len(),
        tally.differences.len(),
        began.elapsed(),
        applied,
        first
    );
    for entry in INTENDED {
        eprintln!("  intended: {}: {}", entry.field, entry.reason);
    }
    assert!(
        tally.differences.is_empty(),
        "{} fields differ between ours and Flux's:\n{}",
        tally.differences.len(),
        tally.differences.join("\n")
    );
}
