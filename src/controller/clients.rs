//! The client a Kustomization's objects are applied with: the controller's own, an impersonated
//! ServiceAccount (`serviceAccountName` or `--default-service-account`), or a remote cluster
//! from `spec.kubeConfig.secretRef`.
//!
//! Sources, dependencies, substitution ConfigMaps/Secrets and the kubeconfig Secret itself are
//! always read with the controller's identity; only applied objects go through this client.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};

use crate::api::Kustomization;

/// Keys tried, in order, when `secretRef.key` is not set.
const KUBECONFIG_KEYS: [&str; 2] = ["value", "value.yaml"];

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("unable to read KubeConfig secret '{0}' error: {1}")]
    ReadSecret(String, #[source] kube::Error),
    #[error("KubeConfig secret '{0}' does not contain a '{1}' key with a kubeconfig")]
    MissingKey(String, String),
    #[error("invalid kubeconfig in secret '{0}': {1}")]
    InvalidKubeConfig(String, String),
    #[error("kubeconfig in secret '{0}' uses an exec credential plugin, which is not allowed")]
    ExecNotAllowed(String),
    #[error("failed to build kube client: {0}")]
    Build(#[source] kube::Error),
}

/// The ServiceAccount to impersonate, if any.
pub fn service_account(ks: &Kustomization, default: Option<&str>) -> Option<String> {
    ks.spec
        .service_account_name
        .as_deref()
        .or(default)
        .filter(|sa| !sa.is_empty())
        .map(str::to_string)
}

/// The user name Kubernetes gives a ServiceAccount.
pub fn impersonated_user(namespace: &str, service_account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{service_account}")
}

/// Builds clients for reconciles.
#[derive(Clone)]
pub struct ClientFactory {
    /// The controller's own client.
    pub client: Client,
    config: Config,
    default_service_account: Option<String>,
}

impl ClientFactory {
    pub fn new(client: Client, config: Config, default_service_account: Option<String>) -> Self {
        Self {
            client,
            config,
            default_service_account: default_service_account.filter(|s| !s.is_empty()),
        }
    }

    /// The ServiceAccount this Kustomization acts as, if any.
    pub fn service_account(&self, ks: &Kustomization) -> Option<String> {
        service_account(ks, self.default_service_account.as_deref())
    }

    /// The client to apply, prune and health-check this Kustomization's objects with.
    pub async fn for_kustomization(&self, ks: &Kustomization) -> Result<Client, ClientError> {
        let namespace = ks.namespace().unwrap_or_default();
        let mut config = match ks.spec.kube_config.as_ref().and_then(|k| k.secret_ref.as_ref()) {
            Some(secret_ref) => {
                let secret_name = format!("{namespace}/{}", secret_ref.name);
                let secret = Api::<Secret>::namespaced(self.client.clone(), &namespace)
                    .get(&secret_ref.name)
                    .await
                    .map_err(|e| ClientError::ReadSecret(secret_name.clone(), e))?;
                let keys: Vec<&str> = match secret_ref.key.as_deref() {
                    Some(key) => vec![key],
                    None => KUBECONFIG_KEYS.to_vec(),
                };
                let data = secret.data.unwrap_or_default();
                let bytes = keys
                    .iter()
                    .find_map(|key| data.get(*key))
                    .ok_or_else(|| ClientError::MissingKey(secret_name.clone(), keys[0].to_string()))?;
                remote_config(&secret_name, &bytes.0).await?
            }
            None => self.config.clone(),
        };
        if let Some(sa) = self.service_account(ks) {
            config.auth_info.impersonate = Some(impersonated_user(&namespace, &sa));
        }
        if ks.spec.kube_config.is_none() && self.service_account(ks).is_none() {
            return Ok(self.client.clone());
        }
        Client::try_from(config).map_err(ClientError::Build)
    }

    /// Whether the ServiceAccount this Kustomization impersonates exists. Deletion skips pruning
    /// when it does not, rather than failing forever.
    pub async fn service_account_exists(&self, ks: &Kustomization) -> Result<bool, kube::Error> {
        let Some(sa) = self.service_account(ks) else {
            return Ok(true);
        };
        let namespace = ks.namespace().unwrap_or_default();
        Ok(Api::<ServiceAccount>::namespaced(self.client.clone(), &namespace)
            .get_opt(&sa)
            .await?
            .is_some())
    }
}

/// A remote cluster's config. Exec plugins could run arbitrary commands on the controller's
/// host, so they are refused (Flux allows them only behind `--insecure-kubeconfig-exec`).
async fn remote_config(secret_name: &str, bytes: &[u8]) -> Result<Config, ClientError> {
    let text = String::from_utf8_lossy(bytes);
    let kubeconfig = Kubeconfig::from_yaml(&text)
        .map_err(|e| ClientError::InvalidKubeConfig(secret_name.to_string(), e.to_string()))?;
    if kubeconfig
        .auth_infos
        .iter()
        .any(|a| a.auth_info.as_ref().is_some_and(|i| i.exec.is_some()))
    {
        return Err(ClientError::ExecNotAllowed(secret_name.to_string()));
    }
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| ClientError::InvalidKubeConfig(secret_name.to_string(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(service_account: Option<&str>) -> Kustomization {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"interval": "5m", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "repo"},
                "serviceAccountName": service_account}
        }))
        .unwrap()
    }

    #[test]
    fn spec_service_account_wins_over_the_default() {
        assert_eq!(
            service_account(&ks(Some("deployer")), Some("fallback")).as_deref(),
            Some("deployer")
        );
        assert_eq!(
            service_account(&ks(None), Some("fallback")).as_deref(),
            Some("fallback")
        );
        assert_eq!(service_account(&ks(None), None), None);
        assert_eq!(
            impersonated_user("team-a", "deployer"),
            "system:serviceaccount:team-a:deployer"
        );
    }

    #[tokio::test]
    async fn exec_plugins_are_refused_and_bad_yaml_names_the_secret() {
        let exec = r#"
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://remote:6443"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/steal}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"#;
        let err = remote_config("team-a/remote", exec.as_bytes()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubeconfig in secret 'team-a/remote' uses an exec credential plugin, which is not allowed"
        );
        let err = remote_config("team-a/remote", b"{not yaml").await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid kubeconfig in secret 'team-a/remote'"),
            "{err}"
        );
    }
}
