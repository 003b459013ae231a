//! The suite's processes and how a scenario runs: one Git server, one source-controller,
//! Flux's controller and ours (each with an event receiver), a watch on Kubernetes events,
//! and per scenario two namespaces driven through the same steps.

mod oci_source;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use super::scenarios::{Action, Expect, Files, Scenario};
use crate::support::controller::ControllerProcess;
use crate::support::flux::{
    GitRepo, GitServer, SourceController, apply_git_repository, main_revision, source_controller_crds,
};
use crate::support::receiver::EventReceiver;
use crate::support::{TestNamespace, client, kustomization_crd, unique_suffix};
use test_support::free_port;
use test_support::registry::{Options, Registry};

/// How long one wait of a step may take before the snapshot is taken anyway (and shows it).
const SETTLE_LIMIT: Duration = Duration::from_secs(90);
/// How long source-controller may take to fetch a commit, all scenarios' at once.
const FETCH_LIMIT: Duration = Duration::from_secs(180);
/// The label each controller selects its Kustomizations by.
pub(super) const CONTROLLER_LABEL: &str = "e2e.diff/controller";
/// The label source-controller selects the suite's sources by.
const RUN_LABEL: &str = "e2e.diff/run";

/// The directory e2e/fluxkc/build.sh printed: Flux's kustomize-controller and its CRDs.
fn fluxkc_bin() -> PathBuf {
    let dir = std::env::var("E2E_FLUXKC_BIN").expect(
        "E2E_FLUXKC_BIN is not set: `make test` exports it from e2e/fluxkc/build.sh \
         (or run `export E2E_FLUXKC_BIN=$(e2e/fluxkc/build.sh)`)",
    );
    PathBuf::from(dir)
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Side {
    Flux,
    Ours,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Flux => "flux",
            Side::Ours => "ours",
        }
    }
}

struct Peer {
    side: Side,
    process: Option<ControllerProcess>,
    log: PathBuf,
    receiver: EventReceiver,
}

/// A Kubernetes event about a Kustomization, as the watch saw it created.
#[derive(Clone)]
struct SeenEvent {
    namespace: String,
    /// The Kustomization it is about.
    object: String,
    /// When the controller says it happened (events.k8s.io's microsecond `eventTime`); Flux's
    /// core/v1 events have none and keep the order the API server created them in.
    time: i128,
    text: String,
}

/// An age key pair made for the suite; the real sops encrypts with it.
pub(super) struct Keys {
    dir: tempfile::TempDir,
    pub(super) identity: String,
    /// An identity the files are not encrypted for.
    pub(super) stranger: String,
    recipient: String,
}

impl Keys {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keygen = |name: &str| {
            let file = dir.path().join(name);
            run(Command::new(sops_dir().join("age-keygen")).arg("-o").arg(&file));
            std::fs::read_to_string(&file).unwrap()
        };
        let (identity, stranger) = (keygen("age.txt"), keygen("stranger.txt"));
        let recipient = identity
            .lines()
            .find_map(|l| l.strip_prefix("# public key: "))
            .expect("age-keygen wrote a public key")
            .to_string();
        Self {
            dir,
            identity,
            stranger,
            recipient,
        }
    }

    /// `plain` encrypted by the real sops for the suite's age key, its data fields only.
    pub(super) fn encrypt(&self, name: &str, plain: &str) -> String {
        let file = self.dir.path().join(name);
        std::fs::write(&file, plain).unwrap();
        let config = self.dir.path().join(".sops.yaml");
        std::fs::write(&config, "creation_rules: [{}]\n").unwrap();
        run(Command::new(sops_dir().join("sops"))
            .env_remove("SOPS_AGE_KEY_FILE")
            .arg("--config")
            .arg(&config)
            .args([
                "encrypt",
                "--age",
                &self.recipient,
                "--encrypted-regex",
                "^(data|stringData)$",
            ])
            .arg(&file))
    }
}

fn sops_dir() -> PathBuf {
    PathBuf::from(std::env::var("E2E_SOPS_BIN").expect("E2E_SOPS_BIN is not set: `make test` exports it"))
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub(super) struct Suite {
    client: Client,
    id: String,
    namespace: TestNamespace,
    git: GitServer,
    source: SourceController,
    /// The registry OCIRepository scenarios push to.
    registry: Registry,
    flux: Peer,
    ours: Peer,
    events: Arc<Mutex<Vec<SeenEvent>>>,
    pub(super) keys: Keys,
    _dir: tempfile::TempDir,
}

/// What one scenario left on each side: a snapshot per step, raw (unmasked).
pub(super) struct RunResult {
    pub(super) name: &'static str,
    namespaces: [String; 2],
    snapshots: Vec<[Value; 2]>,
}

impl Suite {
    pub(super) async fn start() -> Self {
        let client = client().await;
        kustomization_crd(&client).await;
        source_controller_crds(&client).await;
        let id = unique_suffix();
        let namespace = TestNamespace::new(&client, &format!("kcd-{id}")).await;
        let dir = tempfile::tempdir().unwrap();
        let git = GitServer::start().await;
        let source = SourceController::start_with_args(
            &namespace.name,
            &[
                "--watch-all-namespaces=true".into(),
                format!("--watch-label-selector={RUN_LABEL}={id}"),
                // Two sources per scenario, all at once.
                "--concurrent=10".into(),
            ],
        );
        let events = Arc::new(Mutex::new(Vec::new()));
        watch_events(&client, &format!("kcd-{id}-"), events.clone()).await;
        let flux = start_peer(Side::Flux, &id, &namespace.name, &dir.path().join("flux"));
        let ours = start_peer(Side::Ours, &id, &namespace.name, &dir.path().join("ours"));
        Self {
            client,
            id,
            namespace,
            git,
            source,
            registry: Registry::start(Options::default()),
            flux,
            ours,
            events,
            keys: Keys::new(),
            _dir: dir,
        }
    }

    fn namespace_of(&self, scenario: &str, side: Side) -> String {
        format!("kcd-{}-{scenario}-{}", self.id, &side.name()[..1])
    }

    /// Runs every step of `scenario` on both sides and snapshots both after each.
    pub(super) async fn run(&self, scenario: &Scenario) -> RunResult {
        let sides = [Side::Flux, Side::Ours];
        let namespaces = sides.map(|side| self.namespace_of(scenario.name, side));
        let repo = self.git.repository(scenario.name);
        let mut head = main_revision(&repo.commit(&as_refs(&scenario.files)));
        for ns in &namespaces {
            self.create_namespace(ns).await;
            for object in &scenario.setup {
                apply_object(&self.client, &template(object, ns)).await;
            }
        }
        futures::future::join_all(
            namespaces
                .iter()
                .map(|ns| self.source_at(ns, &repo, &head, false)),
        )
        .await;

        let mut snapshots = Vec::new();
        for step in &scenario.steps {
            match &step.action {
                Action::Apply(list) => {
                    for ns in &namespaces {
                        let side = if ns.ends_with("-f") {
                            Side::Flux
                        } else {
                            Side::Ours
                        };
                        for (name, spec) in list {
                            self.apply_kustomization(ns, side, name, spec).await;
                        }
                    }
                }
                Action::Commit(files) => {
                    head = main_revision(&repo.commit(&as_refs(files)));
                    futures::future::join_all(
                        namespaces.iter().map(|ns| self.source_at(ns, &repo, &head, true)),
                    )
                    .await;
                }
                Action::Push(files) => {
                    head = self.push(scenario.name, &repo, &namespaces, files).await;
                }
                Action::Delete(name) => {
                    for ns in &namespaces {
                        let _ = self
                            .kustomizations(ns)
                            .delete(name, &DeleteParams::background())
                            .await;
                    }
                }
                Action::Objects(objects) => {
                    for ns in &namespaces {
                        for object in objects {
                            apply_object(&self.client, &template(object, ns)).await;
                        }
                    }
                }
            }
            let waits = namespaces.iter().map(|ns| async {
                let mut settled = serde_json::Map::new();
                for (name, expect) in &step.wait {
                    settled.insert(
                        name.to_string(),
                        json!(self.settle(ns, name, expect, &head).await),
                    );
                }
                settled
            });
            let settled = futures::future::join_all(waits).await;
            // What is sent after the status (events, notifications) has a moment to land.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut pair = [Value::Null, Value::Null];
            for (i, ns) in namespaces.iter().enumerate() {
                let mut snapshot = super::mask::snapshot(&self.client, ns).await;
                snapshot["settled"] = Value::Object(settled[i].clone());
                pair[i] = snapshot;
            }
            snapshots.push(pair);
        }
        RunResult {
            name: scenario.name,
            namespaces,
            snapshots,
        }
    }

    /// Both sides of `run`, masked: its snapshots, then the events and notifications of the
    /// whole run.
    pub(super) fn observed(&self, run: &RunResult) -> (Value, Value) {
        let events = self.events.lock().unwrap().clone();
        let sides = [
            (&self.flux, &run.namespaces[0], 0),
            (&self.ours, &run.namespaces[1], 1),
        ];
        let [flux, ours] = sides.map(|(peer, ns, i)| {
            let steps: Vec<Value> = run.snapshots.iter().map(|pair| pair[i].clone()).collect();
            // Per Kustomization (those of a scenario run concurrently), in the order the
            // controller emitted them: ours writes events from several tasks at once, so
            // creation order is not emission order, but its eventTime is.
            let mut mine: Vec<&SeenEvent> = events.iter().filter(|e| &e.namespace == ns).collect();
            mine.sort_by_key(|e| e.time);
            let mut by_object: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for e in mine {
                by_object.entry(e.object.clone()).or_default().push(json!(e.text));
            }
            let mut notifications: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for n in peer.receiver.accepted() {
                if n["involvedObject"]["namespace"] == ns.as_str() {
                    let name = n["involvedObject"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    notifications.entry(name).or_default().push(n);
                }
            }
            let events = by_object;
            let raw = json!({"steps": steps, "events": events, "notifications": notifications});
            super::mask::mask(raw, ns)
        });
        (flux, ours)
    }

    async fn create_namespace(&self, name: &str) {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        apply_object(&self.client, &ns).await;
    }

    fn kustomizations(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &kustomization_resource())
    }

    async fn apply_kustomization(&self, ns: &str, side: Side, name: &str, overrides: &Value) {
        let mut spec = json!({
            "interval": "1h", "path": "./", "prune": true, "timeout": "30s", "targetNamespace": ns,
            "sourceRef": {"kind": "GitRepository", "name": "repo"},
        });
        merge(&mut spec, &template(overrides, ns));
        let object = json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns,
                "labels": {CONTROLLER_LABEL: format!("{}-{}", side.name(), self.id)}},
            "spec": spec,
        });
        self.kustomizations(ns)
            .patch(
                name,
                &PatchParams::apply("e2e-diff").force(),
                &Patch::Apply(object),
            )
            .await
            .unwrap_or_else(|e| panic!("apply Kustomization {ns}/{name}: {e}"));
    }

    /// Creates GitRepository `repo` in `ns` (or asks it to fetch again) and waits until its
    /// artifact is `head`.
    async fn source_at(&self, ns: &str, repo: &GitRepo, head: &str, refetch: bool) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &git_repository_resource());
        if refetch {
            let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": head}}});
            api.patch("repo", &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        } else {
            apply_git_repository(&self.client, ns, "repo", &repo.url, "1h").await;
            let labels = json!({"metadata": {"labels": {RUN_LABEL: self.id}}});
            api.patch("repo", &PatchParams::default(), &Patch::Merge(labels))
                .await
                .unwrap();
        }
        let deadline = tokio::time::Instant::now() + FETCH_LIMIT;
        loop {
            let source = api.get("repo").await.unwrap();
            if source.data["status"]["artifact"]["revision"] == head {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "GitRepository {ns}/repo never reached {head}: {}\nsource-controller log:\n{}",
                source.data["status"],
                tail(&self.source.logs(), 30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until Kustomization `name` in `ns` meets `expect`; whether it did goes into
    /// the snapshot, so a side that never settles shows as a difference.
    async fn settle(&self, ns: &str, name: &str, expect: &Expect, head: &str) -> bool {
        if let Expect::Quiet = expect {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return true;
        }
        let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
        let api = self.kustomizations(ns);
        while tokio::time::Instant::now() < deadline {
            let ks = api.get_opt(name).await.unwrap();
            if settled(
                ks.as_ref().map(|k| &k.data),
                k_generation(ks.as_ref()),
                expect,
                head,
            ) {
                // A failure has no status.observedGeneration to wait for, and Flux writes its
                // history in a second patch after the conditions: settled once nothing more
                // is written for a moment.
                let failed = ks
                    .as_ref()
                    .is_some_and(|k| ready_status(&k.data) == Some("False"));
                if !failed {
                    return true;
                }
                let version = ks.and_then(|k| k.metadata.resource_version);
                tokio::time::sleep(Duration::from_secs(1)).await;
                let again = api.get_opt(name).await.unwrap();
                if again.and_then(|k| k.metadata.resource_version) == version {
                    return true;
                }
                continue;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        false
    }

    /// Stops both controllers (their logs stay) and the receivers' senders with them.
    pub(super) fn stop(&mut self) {
        self.flux.process.take();
        self.ours.process.take();
    }

    /// The controllers' logs, for a failure message (their files).
    pub(super) fn logs(&self) -> String {
        [&self.flux, &self.ours]
            .iter()
            .map(|p| format!("{} controller log: {}", p.side.name(), p.log.display()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Deletes every namespace of the suite (controllers stopped first: nothing finalizes).
    pub(super) async fn delete(self, runs: &[RunResult]) {
        let names = runs
            .iter()
            .flat_map(|run| run.namespaces.iter())
            .flat_map(|ns| [ns.clone(), format!("{ns}-t")]);
        futures::future::join_all(names.map(|name| TestNamespace::existing(&self.client, &name).delete()))
            .await;
        self.namespace.delete().await;
    }
}

fn k_generation(ks: Option<&DynamicObject>) -> i64 {
    ks.and_then(|k| k.metadata.generation).unwrap_or(0)
}

fn ready_condition(ks: &Value) -> Option<&Value> {
    ks["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
}

fn ready_status(ks: &Value) -> Option<&str> {
    ready_condition(ks).and_then(|c| c["status"].as_str())
}

/// Whether a Kustomization (`None`: absent) meets `expect` with the source at `head`.
fn settled(ks: Option<&Value>, generation: i64, expect: &Expect, head: &str) -> bool {
    let Some(ks) = ks else {
        return matches!(expect, Expect::Gone);
    };
    let ready = ready_condition(ks);
    // Flux writes the conditions and the rest of the status in two patches: a success is
    // whole once status.observedGeneration follows.
    let done = ready.is_some_and(|c| {
        c["observedGeneration"] == generation
            && (c["status"] == "False"
                || (c["status"] == "True" && ks["status"]["observedGeneration"] == generation))
    });
    match expect {
        Expect::Revision => done && ks["status"]["lastAttemptedRevision"] == head,
        Expect::Done => done,
        Expect::Suspended => ks["status"]["observedGeneration"] == generation,
        Expect::Gone | Expect::Quiet => false,
    }
}

fn start_peer(side: Side, id: &str, runtime_namespace: &str, dir: &std::path::Path) -> Peer {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let receiver = EventReceiver::start(dir);
    let (metrics, health) = (free_port(), free_port());
    let mut command = match side {
        Side::Flux => Command::new(fluxkc_bin().join("kustomize-controller")),
        Side::Ours => Command::new(env!("CARGO_BIN_EXE_kustomize-controller")),
    };
    // The same flags for both: every namespace, this suite's label, one attempt per
    // dependency wait within the suite's time, workers for all scenarios at once.
    command
        .args([
            "--watch-all-namespaces=true".to_string(),
            format!("--watch-label-selector={CONTROLLER_LABEL}={}-{id}", side.name()),
            "--enable-leader-election=false".into(),
            format!("--events-addr={}", receiver.addr),
            "--requeue-dependency=10m".into(),
            // Flux waits for health in its workers: enough of them that the suite's waits
            // do not queue behind each other.
            "--concurrent=10".into(),
            format!("--metrics-addr=127.0.0.1:{metrics}"),
            format!("--health-addr=127.0.0.1:{health}"),
        ])
        .env("RUNTIME_NAMESPACE", runtime_namespace)
        // A temp dir of its own per peer: with a shared /tmp, Flux's build directories
        // vanished mid-build when suites ran side by side ("evalsymlink failure on
        // /tmp/kustomization-..."); each peer's files now stay apart.
        .env("TMPDIR", &tmp)
        .env_remove("RUST_LOG");
    let process = ControllerProcess::spawn(
        command,
        &format!("{runtime_namespace}-{}", side.name()),
        metrics,
        health,
    );
    Peer {
        side,
        log: process.log.clone(),
        process: Some(process),
        receiver,
    }
}

/// Records every Kubernetes event about a Kustomization in a namespace starting with
/// `prefix`, in the order the API server created them (a repeat that only raises a count
/// is not a new event).
async fn watch_events(client: &Client, prefix: &str, seen: Arc<Mutex<Vec<SeenEvent>>>) {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let version = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let prefix = prefix.to_string();
    tokio::spawn(async move {
        let mut version = version;
        loop {
            let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &version).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = stream.boxed();
            while let Some(Ok(event)) = stream.next().await {
                match event {
                    WatchEvent::Added(e) => {
                        version = e.metadata.resource_version.clone().unwrap_or(version);
                        let namespace = e.metadata.namespace.clone().unwrap_or_default();
                        let kind = e
                            .regarding
                            .as_ref()
                            .and_then(|r| r.kind.clone())
                            .unwrap_or_default();
                        if namespace.starts_with(&prefix) && kind == "Kustomization" {
                            let name = e
                                .regarding
                                .as_ref()
                                .and_then(|r| r.name.clone())
                                .unwrap_or_default();
                            let time = e.event_time.as_ref().map_or(0, |t| t.0.as_nanosecond());
                            let text = format!(
                                "{} {}: {}",
                                e.type_.unwrap_or_default(),
                                e.reason.unwrap_or_default(),
                                e.note.unwrap_or_default()
                            );
                            seen.lock().unwrap().push(SeenEvent {
                                namespace,
                                object: name,
                                time,
                                text,
                            });
                        }
                    }
                    WatchEvent::Modified(e) | WatchEvent::Deleted(e) => {
                        version = e.metadata.resource_version.unwrap_or(version);
                    }
                    WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                    WatchEvent::Error(_) => break,
                }
            }
        }
    });
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn as_refs(files: &Files) -> Vec<(&str, &str)> {
    files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect()
}

/// `value` with every `{ns}` replaced by the namespace of the side.
fn template(value: &Value, ns: &str) -> Value {
    serde_json::from_str(&value.to_string().replace("{ns}", ns)).unwrap()
}

/// JSON merge patch semantics: `patch`'s null removes a key.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

pub(super) fn kustomization_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
        "kustomizations",
    )
}

fn git_repository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository"),
        "gitrepositories",
    )
}

/// The kinds the scenarios create or apply: their resource and whether they are namespaced.
pub(super) const KINDS: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("", "v1", "Service", "services", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    ("batch", "v1", "CronJob", "cronjobs", true),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
];

pub(super) fn resource_of(kind: &str) -> (ApiResource, bool) {
    let (group, version, kind, plural, namespaced) = KINDS
        .iter()
        .find(|k| k.2 == kind)
        .unwrap_or_else(|| panic!("the suite does not know kind {kind}"));
    (
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
        *namespaced,
    )
}

/// Server-side applies `object` (one of [`KINDS`]) as the suite.
async fn apply_object(client: &Client, object: &Value) {
    let (resource, namespaced) = resource_of(object["kind"].as_str().unwrap());
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(
            client.clone(),
            object["metadata"]["namespace"].as_str().unwrap(),
            &resource,
        )
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.patch(
        name,
        &PatchParams::apply("e2e-diff").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {} {name}: {e}", object["kind"]));
}
