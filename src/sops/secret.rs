//! Reading a Kustomization's decryption keys from its `spec.decryption.secretRef` Secret
//! (same namespace, with the controller's own identity, as Flux reads it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::{Keys, SopsError};
use crate::api::Kustomization;
use crate::api::conditions::reason;
use crate::api::kustomization::given;
use crate::error::StepError;

/// The decryption Secret could not be read or holds a key that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// Flux reports a missing Secret with the API server's own words.
    #[error("secrets \"{0}\" not found")]
    NotFound(String),
    #[error("cannot get sops decryption Secret '{secret}': {source}")]
    Api {
        secret: String,
        #[source]
        source: kube::Error,
    },
    /// Flux's words (`failed to get decryption service account '<ns>/<name>': <API error>`).
    #[error("failed to get decryption service account '{account}': {message}")]
    ServiceAccount { account: String, message: String },
    #[error(transparent)]
    Import(#[from] SopsError),
}

/// A failure to get the keys fails the build, retried after `spec.retryInterval`: the
/// Secret may be created or fixed at any time.
impl StepError for KeysError {
    fn reason(&self) -> &'static str {
        reason::BUILD_FAILED
    }
}

/// The keys for `ks`, or `None` without `spec.decryption`. Without a `secretRef` the
/// controller's global age Secret (`--sops-age-secret`, as `(namespace, name)`) supplies its
/// `*.agekey` entries; `SOPS_AGE_KEY` in the controller's environment applies when no
/// age identity was found.
pub(crate) async fn load_keys(
    client: &Client,
    ks: &Kustomization,
    age_secret: Option<(&str, &str)>,
) -> Result<Option<Keys>, KeysError> {
    let Some(decryption) = &ks.spec.decryption else {
        return Ok(None);
    };
    let env_age = std::env::var("SOPS_AGE_KEY").ok();
    let namespace = ks.namespace().unwrap_or_default();
    let (namespace, name, age_only) = match (&decryption.secret_ref, age_secret) {
        (Some(reference), _) => (namespace.as_str(), reference.name.as_str(), false),
        (None, Some((namespace, name))) => (namespace, name, true),
        (None, None) => {
            let keys = Keys::from_secret("", &BTreeMap::new(), env_age.as_deref())?;
            return with_service_account(client, ks, keys).await.map(Some);
        }
    };
    let shown = format!("{namespace}/{name}");
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|source| KeysError::Api {
            secret: shown.clone(),
            source,
        })?
        .ok_or_else(|| KeysError::NotFound(name.to_string()))?;
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !age_only || k.ends_with(".agekey"))
        .map(|(k, v)| (k, v.0))
        .collect();
    let keys = Keys::from_secret(&shown, &data, env_age.as_deref())?;
    with_service_account(client, ks, keys).await.map(Some)
}

/// `spec.decryption.serviceAccountName`: read, as Flux reads it after the keys, so that a
/// missing account fails the build; Flux then authenticates key services (KMS, Vault) as that
/// account, which this controller does not call (a document that needs one fails naming it).
async fn with_service_account(client: &Client, ks: &Kustomization, keys: Keys) -> Result<Keys, KeysError> {
    let decryption = ks.spec.decryption.as_ref();
    let Some(name) = decryption.and_then(|d| given(d.service_account_name.as_deref())) else {
        return Ok(keys);
    };
    let namespace = ks.namespace().unwrap_or_default();
    let failed = |message: String| KeysError::ServiceAccount {
        account: format!("{namespace}/{name}"),
        message,
    };
    Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .get(name)
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) => failed(status.message),
            other => failed(other.to_string()),
        })?;
    Ok(keys.with_service_account(name.to_string()))
}
