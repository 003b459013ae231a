//! Reading a Kustomization's decryption keys from its `spec.decryption.secretRef` Secret
//! (same namespace, with the controller's own identity, as Flux reads it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use super::{Keys, SopsError};
use crate::api::Kustomization;
use crate::api::conditions::reason;
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

/// The keys for `ks`, or `None` without `spec.decryption`. Without a `secretRef` only the
/// controller's `SOPS_AGE_KEY` environment applies.
pub(crate) async fn load_keys(client: &Client, ks: &Kustomization) -> Result<Option<Keys>, KeysError> {
    let Some(decryption) = &ks.spec.decryption else {
        return Ok(None);
    };
    let env_age = std::env::var("SOPS_AGE_KEY").ok();
    let Some(reference) = &decryption.secret_ref else {
        return Ok(Some(Keys::from_secret("", &BTreeMap::new(), env_age.as_deref())?));
    };
    let namespace = ks.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = api
        .get_opt(&reference.name)
        .await
        .map_err(|source| KeysError::Api {
            secret: format!("{namespace}/{}", reference.name),
            source,
        })?
        .ok_or_else(|| KeysError::NotFound(reference.name.clone()))?;
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let shown = format!("{namespace}/{}", reference.name);
    Ok(Some(Keys::from_secret(&shown, &data, env_age.as_deref())?))
}
