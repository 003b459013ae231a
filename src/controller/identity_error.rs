//! Why the identity a Kustomization applies with could not be had: its kubeconfig Secret or
//! ConfigMap, a workload identity's token, or the client built from them. Its own module
//! because both the identities and the workload identity raise it.

use std::time::Duration;

use super::kubeconfig::Refusal;
use crate::api::conditions::reason;
use crate::error::{Retry, StepError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error("unable to read KubeConfig secret '{0}' error: {1}")]
    ReadSecret(String, #[source] kube::Error),
    #[error("KubeConfig secret '{0}' does not contain a '{1}' key with a kubeconfig")]
    MissingKey(String, String),
    #[error("the kubeconfig in secret '{0}' {1}")]
    Refused(String, #[source] Refusal),
    #[error("invalid kubeconfig in secret '{0}': {1}")]
    InvalidKubeConfig(String, String),
    #[error("unable to read KubeConfig configmap '{0}' error: {1}")]
    ReadConfigMap(String, #[source] kube::Error),
    #[error("KubeConfig configmap '{0}' has no '{1}' key")]
    ConfigMapKey(String, &'static str),
    #[error("KubeConfig configmap '{0}' has an invalid '{1}'")]
    ConfigMapValue(String, &'static str),
    #[error(
        "KubeConfig configmap '{0}' names provider '{1}', which is not supported: only 'generic' (a Kubernetes ServiceAccount token) is"
    )]
    UnsupportedProvider(String, String),
    #[error("unable to create a token for ServiceAccount '{0}': {1}")]
    TokenRequest(String, #[source] kube::Error),
    #[error(
        "KubeConfig configmap '{0}' needs a ServiceAccount token: ObjectLevelWorkloadIdentity feature gate is not enabled"
    )]
    GateDisabled(String),
    #[error("KubeConfig configmap '{0}' names {1} '{2}', which is not in {3}")]
    NotAllowed(String, &'static str, String, &'static str),
    #[error("the token request for ServiceAccount '{0}' returned no token")]
    NoToken(String),
    #[error("{0}")]
    Build(#[source] kube::Error),
}

impl IdentityError {
    /// The kubeconfig Secret or ConfigMap, or the ServiceAccount a ConfigMap names, does not
    /// exist: the remote cluster cannot be reached until someone recreates it.
    pub(crate) fn reference_gone(&self) -> bool {
        match self {
            Self::ReadSecret(_, e) | Self::ReadConfigMap(_, e) | Self::TokenRequest(_, e) => {
                matches!(e, kube::Error::Api(s) if s.code == 404)
            }
            _ => false,
        }
    }
}

impl StepError for IdentityError {
    fn reason(&self) -> &'static str {
        reason::RECONCILIATION_FAILED
    }

    /// What the tenant wrote is refused or incomplete: retrying cannot help until it changes.
    fn retry(&self) -> Retry {
        match self {
            Self::MissingKey(..)
            | Self::Refused(..)
            | Self::InvalidKubeConfig(..)
            | Self::ConfigMapKey(..)
            | Self::ConfigMapValue(..)
            | Self::UnsupportedProvider(..)
            | Self::GateDisabled(..)
            | Self::NotAllowed(..) => Retry::Terminal,
            _ => Retry::RetryInterval,
        }
    }

    fn condition_message(&self, _: Duration) -> String {
        format!("failed to build kube client: {self}")
    }
}
