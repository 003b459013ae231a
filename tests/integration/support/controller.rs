//! Running the controller binary against the test control plane, scoped to one namespace, and
//! the Kustomization fixtures the controller tests share.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kustomize_controller::api::Kustomization;
use kustomize_controller::api::kustomization::SourceKind;
use serde_json::{Value, json};

use super::artifacts::{self, ArtifactServer, Reply, test_archive};
use super::eventually;

/// A controller process watching only `namespace` (RUNTIME_NAMESPACE with
/// `--watch-all-namespaces=false`), so tests running in parallel do not see each other.
/// Killed when dropped.
pub struct ControllerProcess {
    child: Child,
    pub metrics_port: u16,
    pub log: std::path::PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ControllerProcess {
    pub fn start(namespace: &str, extra_args: &[&str]) -> Self {
        Self::start_as(namespace, "kc-test", extra_args)
    }

    /// Starts a replica with its own identity (`POD_NAME`), for leader election.
    pub fn start_as(namespace: &str, identity: &str, extra_args: &[&str]) -> Self {
        let metrics_port = free_port();
        let log = std::env::temp_dir().join(format!("kc-{namespace}-{metrics_port}.log"));
        let log_file = std::fs::File::create(&log).expect("controller log file");
        let child = Command::new(env!("CARGO_BIN_EXE_kustomize-controller"))
            .arg("run")
            .arg("--watch-all-namespaces=false")
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg("--requeue-dependency=2s")
            .args(extra_args)
            .env("RUNTIME_NAMESPACE", namespace)
            .env("POD_NAME", identity)
            .env("RUST_LOG", "info,kustomize_controller=debug")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start the controller binary");
        Self {
            child,
            metrics_port,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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

    /// The value of a metric line starting with `prefix`, from /metrics.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let text = http_get(self.metrics_port, "/metrics").await?;
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
    let object = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    });
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

/// events.k8s.io Events about `name` in `namespace`, as (type, reason, note, annotations).
pub async fn events_about(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Vec<(String, String, String, Value)> {
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
                serde_json::to_value(e.metadata.annotations.unwrap_or_default()).unwrap(),
            )
        })
        .collect()
}
