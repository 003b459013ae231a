//! Shared fixtures: the client for the test control plane, per-test namespaces, waiting.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use tokio::sync::OnceCell;

pub mod artifacts;

/// The config of the control plane named by `KUBECONFIG`. There is no fallback and no skip: a
/// missing control plane fails the test, loudly.
pub async fn config() -> Config {
    let path = std::env::var("KUBECONFIG")
        .expect("KUBECONFIG is not set: run the tests with `make test` (it starts the control plane)");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read KUBECONFIG {path}: {e}"));
    Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("invalid KUBECONFIG {path}: {e}"))
}

/// A client for the control plane named by `KUBECONFIG`.
pub async fn client() -> Client {
    Client::try_from(config().await).expect("kube client")
}

/// The test control plane's admin credentials, as the files `KUBECONFIG` names: (server, CA,
/// client certificate, client key).
pub fn admin_files() -> (String, String, String, String) {
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG is not set: run the tests with `make test`");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cluster = kubeconfig.clusters[0].cluster.clone().unwrap();
    let user = kubeconfig.auth_infos[0].auth_info.clone().unwrap();
    (
        cluster.server.unwrap(),
        cluster.certificate_authority.unwrap(),
        user.client_certificate.unwrap(),
        user.client_key.unwrap(),
    )
}

/// The test control plane's admin as a kubeconfig with inline credentials, what a tenant's
/// `spec.kubeConfig.secretRef` Secret holds: this cluster, reached as a remote one.
pub fn inline_admin_kubeconfig() -> String {
    let (server, ca, cert, key) = admin_files();
    let base64 = |path: &str| serde_json::to_value(ByteString(std::fs::read(path).unwrap())).unwrap();
    format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\", certificate-authority-data: {}}}}}]\n\
         users: [{{name: u, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n",
        base64(&ca),
        base64(&cert),
        base64(&key)
    )
}

/// A namespace that belongs to one test. Names are unique per run so tests can run in parallel
/// and re-run without clashing with a namespace that is still terminating.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", unique_suffix());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        Self {
            name,
            client: client.clone(),
        }
    }

    /// A namespace made some other way (or not at all), to delete like one of ours.
    pub fn existing(client: &Client, name: &str) -> Self {
        Self {
            name: name.to_string(),
            client: client.clone(),
        }
    }

    /// Deletes the namespace. Tests call this at the end; a failed test leaves its namespace
    /// behind for inspection (the cluster is thrown away after the run). Flux objects are
    /// deleted first and lose their finalizers: the test's controller stops with the test, and
    /// a namespace left Terminating would be retried by the namespace controller for the rest
    /// of the run. A deleted object can gain no finalizer, so no controller puts one back.
    pub async fn delete(self) {
        for (group, kind, plural) in [
            ("kustomize.toolkit.fluxcd.io", "Kustomization", "kustomizations"),
            ("source.toolkit.fluxcd.io", "GitRepository", "gitrepositories"),
            ("source.toolkit.fluxcd.io", "OCIRepository", "ocirepositories"),
            ("source.toolkit.fluxcd.io", "Bucket", "buckets"),
        ] {
            let gvk = kube::api::GroupVersionKind::gvk(group, "v1", kind);
            let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.name, &resource);
            let Ok(list) = api.list(&Default::default()).await else {
                continue;
            };
            for object in &list.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                let _ = api.delete(&name, &DeleteParams::background()).await;
                let patch = serde_json::json!({"metadata": {"finalizers": null}});
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
            }
        }
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await;
    }
}

pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}{}", nanos % 0xfffff, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Polls `check` until it returns `Some`, or panics with `what` after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Installs a CRD with server-side apply and waits until it is Established.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.metadata.name.clone().expect("CRD name");
    api.patch(
        &name,
        &PatchParams::apply("e2e-tests").force(),
        &Patch::Apply(crd),
    )
    .await
    .expect("apply CRD");
    wait_established(client, &name).await;
}

/// Waits until CRD `name` is Established.
pub async fn wait_established(client: &Client, name: &str) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    eventually(
        &format!("CRD {name} Established"),
        Duration::from_secs(30),
        || async {
            let crd = api.get(name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        },
    )
    .await;
}

/// The Kustomization CRD, installed once per test binary.
pub async fn kustomization_crd(client: &Client) {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async { install_crd(client, &kustomize_controller::api::kustomization::crd()).await })
        .await;
}

pub mod applier;
pub mod controller;
pub mod crafted_git;
pub mod flux;
pub mod flux_deployment;
pub mod own_plane;
pub mod receiver;
pub mod registry;
pub mod remote;
pub mod tls;

/// A ConfigMap manifest `name` with `data.value`.
pub fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n")
}

/// One ConfigMap manifest per `(name, value)`, as one YAML stream.
pub fn config_maps(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(name, value)| config_map(name, value))
        .collect::<Vec<_>>()
        .join("---\n")
}
