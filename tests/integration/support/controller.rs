//! Running the controller binary against the test control plane, scoped to one namespace, and
//! the Kustomization fixtures the controller tests share.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::{Value, json};

use super::artifacts::{self, ArtifactServer, Reply, test_archive};
use super::{TestNamespace, eventually};
use test_support::free_port;

/// A controller process watching only `namespace` (RUNTIME_NAMESPACE with
/// `--watch-all-namespaces=false`), so tests running in parallel do not see each other.
/// Killed when dropped.
pub struct ControllerProcess {
    child: Child,
    pub metrics_port: u16,
    pub health_port: u16,
    pub log: std::path::PathBuf,
}

/// The arguments most tests start the controller with: one namespace, quick dependency requeues.
fn test_args(extra_args: &[&str]) -> Vec<String> {
    let mut args = ["run", "--watch-all-namespaces=false", "--requeue-dependency=2s"]
        .map(String::from)
        .to_vec();
    args.extend(extra_args.iter().map(|a| a.to_string()));
    args
}

impl ControllerProcess {
    pub fn start(namespace: &str, extra_args: &[&str]) -> Self {
        Self::start_as(namespace, "kc-test", extra_args)
    }

    /// Starts a replica with its own identity (`POD_NAME`), for leader election.
    pub fn start_as(namespace: &str, identity: &str, extra_args: &[&str]) -> Self {
        Self::launch(namespace, identity, &test_args(extra_args), None)
    }

    /// Starts the controller with its own credentials, from `kubeconfig` instead of `KUBECONFIG`.
    pub fn start_with_kubeconfig(namespace: &str, kubeconfig: &std::path::Path, extra_args: &[&str]) -> Self {
        Self::launch(namespace, "kc-test", &test_args(extra_args), Some(kubeconfig))
    }

    fn launch(
        namespace: &str,
        identity: &str,
        args: &[String],
        kubeconfig: Option<&std::path::Path>,
    ) -> Self {
        let (metrics_port, health_port) = (free_port(), free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_kustomize-controller"));
        if let Some(kubeconfig) = kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        command
            .args(args)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            .env("RUNTIME_NAMESPACE", namespace)
            .env("POD_NAME", identity)
            .env("RUST_LOG", "info,kustomize_controller=debug");
        Self::spawn(command, namespace, metrics_port, health_port)
    }

    /// Spawns `command` (our binary, with its arguments) with stderr to a log file; the
    /// command listens for /metrics on `metrics_port` and for the probes on `health_port`.
    pub fn spawn(mut command: Command, namespace: &str, metrics_port: u16, health_port: u16) -> Self {
        let log = std::env::temp_dir().join(format!("kc-{namespace}-{metrics_port}.log"));
        let log_file = std::fs::File::create(&log).expect("controller log file");
        let child = command
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start the controller binary");
        Self {
            child,
            metrics_port,
            health_port,
            log,
        }
    }

    /// The HTTP status line of a probe (`/readyz`, `/healthz`) on the health port.
    pub async fn probe(&self, path: &str) -> Option<String> {
        let response = http_get(self.health_port, path).await?;
        response.lines().next().map(str::to_string)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.child.id());
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("poll the controller process")
    }

    /// SIGTERM, as Kubernetes stops a pod; waits for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().expect("wait for the controller")
    }

    /// The controller's log, for failure messages.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the shared metadata watch of `kind` (e.g. `v1/configmaps`) has its first
    /// complete list, after which quiet passes read it instead of listing.
    pub async fn wait_live_watch_synced(&self, kind: &str) {
        super::eventually(
            "the live metadata watch synced",
            std::time::Duration::from_secs(60),
            || async {
                self.logs()
                    .lines()
                    .any(|l| l.contains("live metadata watch synced") && l.contains(kind))
                    .then_some(())
            },
        )
        .await;
    }

    /// The whole /metrics exposition.
    pub async fn metrics_text(&self) -> Option<String> {
        http_get(self.metrics_port, "/metrics").await
    }

    /// `kustomize_controller_api_requests_total` so far, by (verb, resource).
    pub async fn api_requests(&self) -> std::collections::BTreeMap<(String, String), f64> {
        // A controller just started may not listen yet.
        let text = super::eventually("the metrics endpoint", std::time::Duration::from_secs(30), || {
            self.metrics_text()
        })
        .await;
        let mut out = std::collections::BTreeMap::new();
        for line in text.lines() {
            let Some(sample) = line.strip_prefix("kustomize_controller_api_requests_total{") else {
                continue;
            };
            let (labels, value) = sample.rsplit_once("} ").expect("a sample line");
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("a {name} label in {line}"))
                    .to_string()
            };
            *out.entry((label("verb"), label("resource"))).or_default() += value.parse::<f64>().unwrap();
        }
        out
    }

    /// The value of a metric line starting with `prefix`, from /metrics.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let text = self.metrics_text().await?;
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// Serves a tarball of `files` and publishes it as the artifact of GitRepository `repo`.
pub async fn publish(
    client: &Client,
    server: &ArtifactServer,
    namespace: &str,
    repo: &str,
    revision: &str,
    files: &[(&'static str, &str)],
) {
    let members: Vec<_> = files
        .iter()
        .map(|(path, content)| test_archive::file(path, content))
        .collect();
    let bytes = test_archive::tar_gz(&members);
    let path = format!("/{namespace}/{repo}/{}.tar.gz", revision.replace([':', '@'], "-"));
    let url = server.route(&path, Reply::Serve(bytes.clone()));
    artifacts::source_crds(client).await;
    artifacts::publish_artifact(
        client,
        SourceKind::GitRepository,
        namespace,
        repo,
        artifacts::artifact_json(&url, revision, &bytes),
    )
    .await;
}

/// Creates or updates a Kustomization with server-side apply.
pub async fn apply_kustomization(client: &Client, namespace: &str, name: &str, spec: Value) {
    apply_labelled_kustomization(client, namespace, name, json!({}), spec).await;
}

/// Creates or updates a Kustomization carrying `labels` with server-side apply.
pub async fn apply_labelled_kustomization(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: Value,
    spec: Value,
) {
    let mut object = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
    if labels.as_object().is_some_and(|l| !l.is_empty()) {
        object["metadata"]["labels"] = labels;
    }
    Api::<Kustomization>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("e2e-tests").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply Kustomization {namespace}/{name}: {e}"));
}

pub async fn get_kustomization(client: &Client, namespace: &str, name: &str) -> Option<Kustomization> {
    Api::<Kustomization>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

pub fn condition(ks: &Kustomization, type_: &str) -> Option<Condition> {
    ks.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// Waits until Ready has this status and a message containing `message`; returns the object.
pub async fn wait_ready(
    client: &Client,
    controller: &ControllerProcess,
    namespace: &str,
    name: &str,
    status: &str,
    message: &str,
) -> Kustomization {
    let what = format!("{namespace}/{name} Ready={status} '{message}'");
    let found = tokio::time::timeout(
        Duration::from_secs(60),
        eventually(&what, Duration::from_secs(60), || async {
            let ks = get_kustomization(client, namespace, name).await?;
            let ready = condition(&ks, "Ready")?;
            (ready.status == status && ready.message.contains(message)).then_some(ks)
        }),
    )
    .await;
    match found {
        Ok(ks) => ks,
        Err(_) => {
            let last = get_kustomization(client, namespace, name)
                .await
                .and_then(|k| k.status);
            panic!(
                "timed out waiting for {what}; last status: {last:?}\ncontroller log:\n{}",
                controller.logs()
            )
        }
    }
}

/// Waits until `count` Kustomizations in `namespace` report Flux's success message for
/// `revision`; false when they did not within `limit`.
pub async fn all_applied(
    client: &Client,
    namespace: &str,
    count: usize,
    revision: &str,
    limit: Duration,
) -> bool {
    let message = format!("Applied revision: {revision}");
    let api = Api::<Kustomization>::namespaced(client.clone(), namespace);
    let applied = tokio::time::timeout(limit, async {
        loop {
            if let Ok(list) = api.list(&ListParams::default()).await {
                let done = list
                    .items
                    .iter()
                    .filter(|ks| {
                        condition(ks, "Ready")
                            .is_some_and(|r| r.status == "True" && r.message.contains(&message))
                    })
                    .count();
                if done == count {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    applied.await.is_ok()
}

/// The `value` key of ConfigMap `namespace/name`, or `None` when the ConfigMap (or key) is
/// missing.
pub async fn config_map_value(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()?;
    cm.data?.get("value").cloned()
}

/// events.k8s.io Events about `name` in `namespace`, as (type, reason, note, annotations).
pub async fn events_about(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Vec<(String, String, String, Value)> {
    events_by_object(client, namespace)
        .await
        .remove(name)
        .unwrap_or_default()
}

/// events.k8s.io Events in `namespace` by the name of the object they are about, as (type,
/// reason, note, annotations), once per occurrence: a repeat counted on the first Event's
/// series (as Flux's recorder counts it) is there as often as the count says; one LIST.
pub async fn events_by_object(
    client: &Client,
    namespace: &str,
) -> std::collections::BTreeMap<String, Vec<(String, String, String, Value)>> {
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut by_object = std::collections::BTreeMap::<_, Vec<_>>::new();
    for e in events.items {
        let name = e
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .unwrap_or_default();
        let occurrences = e.series.as_ref().map_or(1, |s| s.count.max(1));
        let event = (
            e.type_.unwrap_or_default(),
            e.reason.unwrap_or_default(),
            e.note.unwrap_or_default(),
            serde_json::to_value(e.metadata.annotations.unwrap_or_default()).unwrap(),
        );
        let seen = by_object.entry(name).or_default();
        seen.extend(std::iter::repeat_n(event, occurrences as usize));
    }
    by_object
}

/// A kustomization.yaml that lists one file, `objects.yaml`.
pub const OBJECTS_KUSTOMIZATION: &str =
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [objects.yaml]\n";

/// One controller test's world: the client, the CRD, a namespace of its own and an artifact
/// server standing in for source-controller. Its methods are the steps the tests take, all in
/// that namespace.
pub struct Scenario {
    pub client: Client,
    pub server: ArtifactServer,
    ns: TestNamespace,
}

impl Scenario {
    /// Installs the Kustomization CRD (once per binary), creates the namespace, starts the server.
    pub async fn new(prefix: &str) -> Self {
        let client = super::client().await;
        super::kustomization_crd(&client).await;
        let ns = TestNamespace::new(&client, prefix).await;
        Self {
            client,
            server: ArtifactServer::start().await,
            ns,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.ns.name
    }

    /// A controller process watching this namespace only.
    pub fn start_controller(&self, extra_args: &[&str]) -> ControllerProcess {
        ControllerProcess::start(self.namespace(), extra_args)
    }

    /// Publishes `files` as revision `revision` of GitRepository `repo`.
    pub async fn publish(&self, repo: &str, revision: &str, files: &[(&'static str, &str)]) {
        publish(
            &self.client,
            &self.server,
            self.namespace(),
            repo,
            revision,
            files,
        )
        .await;
    }

    /// Publishes `objects` as `objects.yaml` with a kustomization.yaml listing it.
    pub async fn publish_objects(&self, repo: &str, revision: &str, objects: &str) {
        let files = [
            ("kustomization.yaml", OBJECTS_KUSTOMIZATION),
            ("objects.yaml", objects),
        ];
        self.publish(repo, revision, &files).await;
    }

    /// Creates or updates Kustomization `name`: [`Scenario::spec`] with `overrides` on top.
    pub async fn apply(&self, name: &str, overrides: Value) {
        apply_kustomization(&self.client, self.namespace(), name, self.spec(overrides)).await;
    }

    /// The spec the tests start from: GitRepository `repo` into this namespace, pruned, a 10m
    /// interval (only what a test does triggers a run) and a 30s timeout; `overrides` replace
    /// top-level fields.
    pub fn spec(&self, overrides: Value) -> Value {
        let mut spec = json!({
            "interval": "10m", "prune": true, "timeout": "30s", "targetNamespace": self.namespace(),
            "sourceRef": {"kind": "GitRepository", "name": "repo"},
        });
        if let (Some(spec), Some(overrides)) = (spec.as_object_mut(), overrides.as_object()) {
            spec.extend(overrides.clone());
        }
        spec
    }

    pub async fn get(&self, name: &str) -> Option<Kustomization> {
        get_kustomization(&self.client, self.namespace(), name).await
    }

    /// Waits until Kustomization `name` is Ready=`status` with a message containing `message`.
    pub async fn wait_ready(
        &self,
        controller: &ControllerProcess,
        name: &str,
        status: &str,
        message: &str,
    ) -> Kustomization {
        wait_ready(&self.client, controller, self.namespace(), name, status, message).await
    }

    /// Waits until Kustomization `name` reports Flux's success message for `revision`.
    pub async fn wait_applied(
        &self,
        controller: &ControllerProcess,
        name: &str,
        revision: &str,
    ) -> Kustomization {
        let message = format!("Applied revision: {revision}");
        self.wait_ready(controller, name, "True", &message).await
    }

    /// The `value` key of ConfigMap `name`, or `None` when the ConfigMap (or key) is missing.
    pub async fn config_map_value(&self, name: &str) -> Option<String> {
        config_map_value(&self.client, self.namespace(), name).await
    }

    /// The Events about Kustomization `name`, as [`events_about`] gives them.
    pub async fn events(&self, name: &str) -> Vec<(String, String, String, Value)> {
        events_about(&self.client, self.namespace(), name).await
    }

    /// Deletes the namespace (see [`TestNamespace::delete`]).
    pub async fn delete(self) {
        self.ns.delete().await;
    }
}
