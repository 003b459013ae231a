//! The second control plane `make test` starts (`E2E_TRUST_STATE` in e2e/cluster.sh): a remote
//! cluster that accepts the first one's ServiceAccount tokens as users named
//! `trusted:system:serviceaccount:<namespace>:<name>`.

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config, Resource};

use serde::Serialize;
use serde::de::DeserializeOwned;

pub struct RemoteCluster {
    pub client: Client,
    /// The API server URL, the default token audience.
    pub address: String,
    pub ca_pem: String,
}

/// The user a first-cluster ServiceAccount is on the remote cluster.
pub fn trusted_user(namespace: &str, service_account: &str) -> String {
    format!("trusted:system:serviceaccount:{namespace}:{service_account}")
}

pub async fn remote_cluster() -> RemoteCluster {
    let path = std::env::var("E2E_REMOTE_KUBECONFIG").expect(
        "E2E_REMOTE_KUBECONFIG is not set: `make test` starts the second control plane and exports it",
    );
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read E2E_REMOTE_KUBECONFIG {path}: {e}"));
    let cluster = kubeconfig.clusters[0].cluster.clone().expect("a cluster");
    let address = cluster.server.clone().expect("a server");
    let ca_path = cluster.certificate_authority.clone().expect("a CA file");
    let ca_pem = std::fs::read_to_string(&ca_path).unwrap_or_else(|e| panic!("{ca_path}: {e}"));
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("invalid E2E_REMOTE_KUBECONFIG {path}: {e}"));
    RemoteCluster {
        client: Client::try_from(config).expect("remote kube client"),
        address,
        ca_pem,
    }
}

/// Server-side applies `object`, named `name`, through `api`.
pub async fn apply<K>(api: &Api<K>, name: &str, object: serde_json::Value)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("e2e-tests").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}
