//! Target clusters from `spec.kubeConfig.configMapRef`: no kubeconfig, but the address of a
//! cluster that trusts this cluster's ServiceAccount tokens (an OIDC/JWT authenticator for
//! this cluster's issuer). The controller asks its own cluster for a token of the ServiceAccount
//! the ConfigMap names (a TokenRequest for the ConfigMap's audiences) and presents it there.
//!
//! Only this provider is implemented (Flux calls it `generic`; `kubernetes` is the credential
//! provider's name). Cloud providers (aws, azure, gcp) and spiffe are refused by name: falling
//! back to the controller's own cluster would apply a tenant's objects to the wrong cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};

use super::identity_error::IdentityError;

/// Providers that get a TokenRequest token.
const TOKEN_REQUEST_PROVIDERS: [&str; 2] = ["generic", "kubernetes"];

/// Lifetime asked for each token; the API server may grant a shorter one.
const TOKEN_SECONDS: i64 = 3600;

/// What the operator lets a `configMapRef` ask tokens for: nothing unless the
/// `ObjectLevelWorkloadIdentity` gate is on (as in Flux, which mints such tokens only then);
/// with it on, only the listed addresses and audiences when lists are given. Without the lists
/// a tenant can send its namespace's tokens anywhere, for any audience, even this cluster's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadPolicy {
    pub enabled: bool,
    /// Remote API server addresses, as [`normalized_address`] gives them; empty: any.
    pub allowed_addresses: Vec<String>,
    /// Token audiences; empty: any.
    pub allowed_audiences: Vec<String>,
}

impl WorkloadPolicy {
    /// Whether a token for `cluster` may be minted; the refusal names the ConfigMap and value.
    pub(crate) fn check(&self, config_map: &str, cluster: &WorkloadCluster) -> Result<(), IdentityError> {
        if !self.enabled {
            return Err(IdentityError::GateDisabled(config_map.to_string()));
        }
        let listed = |list: &[String], value: &str| list.is_empty() || list.iter().any(|a| a == value);
        let address = normalized_address(&cluster.address).unwrap_or_default();
        if !listed(&self.allowed_addresses, &address) {
            return Err(IdentityError::NotAllowed(
                config_map.to_string(),
                "address",
                cluster.address.clone(),
                "--workload-identity-allowed-addresses",
            ));
        }
        if let Some(audience) = cluster
            .audiences
            .iter()
            .find(|a| !listed(&self.allowed_audiences, a))
        {
            return Err(IdentityError::NotAllowed(
                config_map.to_string(),
                "audience",
                audience.clone(),
                "--workload-identity-allowed-audiences",
            ));
        }
        Ok(())
    }
}

/// An address as compared with the allow-list: parsed as a URL (lower-case host, default port
/// dropped), without a trailing `/`.
pub fn normalized_address(text: &str) -> Option<String> {
    let url = url::Url::parse(text.trim()).ok()?;
    matches!(url.scheme(), "https" | "http").then(|| url.as_str().trim_end_matches('/').to_string())
}

/// One remote cluster as a ConfigMap describes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WorkloadCluster {
    pub address: String,
    /// PEM; the system roots when absent.
    pub ca: Option<String>,
    pub service_account: String,
    pub audiences: Vec<String>,
}

/// Reads the ConfigMap's keys (`provider`, `address`, `ca.crt`, `serviceAccountName`,
/// `audiences` one per line, defaulting to the address).
pub(crate) fn from_config_map(
    config_map: &str,
    data: &BTreeMap<String, String>,
) -> Result<WorkloadCluster, IdentityError> {
    let get = |key: &str| data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    let missing = |key: &'static str| IdentityError::ConfigMapKey(config_map.to_string(), key);
    let provider = get("provider").ok_or_else(|| missing("provider"))?;
    if !TOKEN_REQUEST_PROVIDERS.contains(&provider) {
        return Err(IdentityError::UnsupportedProvider(
            config_map.to_string(),
            provider.to_string(),
        ));
    }
    let address = get("address").ok_or_else(|| missing("address"))?.to_string();
    let service_account = get("serviceAccountName")
        .ok_or_else(|| missing("serviceAccountName"))?
        .to_string();
    let mut audiences: Vec<String> = get("audiences")
        .map(|a| {
            a.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(address.clone());
    }
    Ok(WorkloadCluster {
        address,
        ca: data.get("ca.crt").cloned().filter(|c| !c.trim().is_empty()),
        service_account,
        audiences,
    })
}

impl WorkloadCluster {
    /// What makes the client: a changed ConfigMap is a new identity.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for part in [
            &self.address,
            self.ca.as_deref().unwrap_or(""),
            &self.service_account,
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        for audience in &self.audiences {
            hash.update(audience.as_bytes());
            hash.update([0]);
        }
        format!("configmap:{}", hex::encode(hash.finalize()))
    }

    /// The remote cluster's client config, presenting `token`.
    pub fn config(&self, config_map: &str, token: &str) -> Result<Config, IdentityError> {
        let invalid = |key: &'static str| IdentityError::ConfigMapValue(config_map.to_string(), key);
        let mut config = Config::new(self.address.parse().map_err(|_| invalid("address"))?);
        if let Some(ca) = &self.ca {
            let roots = CertificateDer::pem_slice_iter(ca.as_bytes())
                .map(|c| c.map(|c| c.to_vec()))
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|roots| !roots.is_empty())
                .ok_or_else(|| invalid("ca.crt"))?;
            config.root_cert = Some(roots);
        }
        config.auth_info =
            serde_json::from_value(serde_json::json!({ "token": token })).expect("a user with a token");
        Ok(config)
    }

    /// A token of the ServiceAccount (in the Kustomization's namespace) for the audiences, and
    /// how long it stays valid.
    pub async fn token(&self, own: &Client, namespace: &str) -> Result<(String, Duration), IdentityError> {
        let account = format!("{namespace}/{}", self.service_account);
        let request = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": self.audiences, "expirationSeconds": TOKEN_SECONDS}
        });
        let granted: TokenRequest = Api::<ServiceAccount>::namespaced(own.clone(), namespace)
            .create_subresource("token", &self.service_account, &PostParams::default(), &request)
            .await
            .map_err(|e| IdentityError::TokenRequest(account.clone(), e))?;
        let status = granted.status.ok_or(IdentityError::NoToken(account))?;
        let left = status.expiration_timestamp.0.duration_since(Timestamp::now());
        Ok((status.token, left.try_into().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_config_map_names_address_account_and_audiences() {
        let cluster = from_config_map(
            "team-a/remote",
            &data(&[
                ("provider", "generic"),
                ("address", "https://remote:6443"),
                ("serviceAccountName", "deployer"),
                ("audiences", "a\n\nb\n"),
                ("ca.crt", "PEM"),
            ]),
        )
        .unwrap();
        assert_eq!(cluster.audiences, ["a", "b"]);
        assert_eq!(cluster.ca.as_deref(), Some("PEM"));
        let defaulted = from_config_map(
            "team-a/remote",
            &data(&[
                ("provider", "kubernetes"),
                ("address", "https://remote:6443"),
                ("serviceAccountName", "deployer"),
            ]),
        )
        .unwrap();
        assert_eq!(defaulted.audiences, ["https://remote:6443"]);
        assert_ne!(cluster.digest(), defaulted.digest());
    }

    fn cluster(address: &str, audiences: &[&str]) -> WorkloadCluster {
        WorkloadCluster {
            address: address.into(),
            ca: None,
            service_account: "deployer".into(),
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Finding 9 of issue 28: any tenant's `configMapRef` got a token of any ServiceAccount of
    /// its namespace, for any audience (this cluster's own API audience worked), sent to any
    /// address, with no gate. Flux mints these tokens only with ObjectLevelWorkloadIdentity on.
    #[test]
    fn tokens_are_minted_only_behind_the_gate() {
        let remote = cluster("https://remote:6443", &["https://remote:6443"]);
        let err = WorkloadPolicy::default()
            .check("team-a/remote", &remote)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "KubeConfig configmap 'team-a/remote' needs a ServiceAccount token: ObjectLevelWorkloadIdentity feature gate is not enabled"
        );
        assert_eq!(
            crate::error::StepError::retry(&err),
            crate::error::Retry::Terminal
        );
        let on = WorkloadPolicy {
            enabled: true,
            ..WorkloadPolicy::default()
        };
        assert!(on.check("team-a/remote", &remote).is_ok(), "no lists: anything");
    }

    #[test]
    fn the_allow_lists_bound_addresses_and_audiences() {
        let policy = WorkloadPolicy {
            enabled: true,
            allowed_addresses: vec!["https://remote:6443".into()],
            allowed_audiences: vec!["remote".into()],
        };
        // The same address spelled otherwise is the same address.
        assert!(
            policy
                .check("a/r", &cluster("https://REMOTE:6443/", &["remote"]))
                .is_ok()
        );
        let err = policy
            .check("a/r", &cluster("https://kubernetes.default.svc", &["remote"]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "KubeConfig configmap 'a/r' names address 'https://kubernetes.default.svc', which is not in --workload-identity-allowed-addresses"
        );
        let err = policy
            .check(
                "a/r",
                &cluster(
                    "https://remote:6443",
                    &["remote", "https://kubernetes.default.svc"],
                ),
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("audience 'https://kubernetes.default.svc', which is not in --workload-identity-allowed-audiences"),
            "{err}"
        );
        assert_eq!(
            normalized_address("https://Remote:443/"),
            Some("https://remote".into())
        );
        assert_eq!(normalized_address("ftp://remote"), None);
    }

    #[test]
    fn other_providers_and_missing_keys_are_refused_by_name() {
        for provider in ["aws", "azure", "gcp", "spiffe"] {
            let err = from_config_map(
                "team-a/remote",
                &data(&[
                    ("provider", provider),
                    ("address", "https://x"),
                    ("serviceAccountName", "d"),
                ]),
            )
            .unwrap_err();
            assert!(
                matches!(&err, IdentityError::UnsupportedProvider(_, p) if p == provider),
                "{err}"
            );
            assert!(err.to_string().contains(&format!("'{provider}'")), "{err}");
        }
        let cases = [
            (
                vec![("address", "https://x"), ("serviceAccountName", "d")],
                "provider",
            ),
            (
                vec![("provider", "generic"), ("serviceAccountName", "d")],
                "address",
            ),
            (
                vec![("provider", "generic"), ("address", "https://x")],
                "serviceAccountName",
            ),
        ];
        for (pairs, key) in cases {
            let err = from_config_map("team-a/remote", &data(&pairs)).unwrap_err();
            assert!(
                matches!(err, IdentityError::ConfigMapKey(_, k) if k == key),
                "{key}"
            );
        }
    }
}
