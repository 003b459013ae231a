//! The ImagePolicy pipeline as pure steps, in the order Flux's reconciler runs them:
//!
//! ```text
//! due?          generation, reconcile request, repository revision, requeue    due.rs
//! repository    namespace default, --no-cross-namespace-refs, accessFrom ACL   repository.rs
//!               (I/O: get the ImageRepository, the policy namespace's labels)
//! checks        repository image parses, workload identity gate                repository.rs
//! select        spec.policy, then (I/O: the store's tags), filterTags          select.rs
//! digest        per digestReflectionPolicy (I/O: HEAD the manifest)            select.rs
//! status        conditions, refs, observedGeneration, event, requeue          status.rs
//! ```
//!
//! The driver (`reconcile`) does the reads in between and hands every outcome to
//! [`status::compute`]; `run` holds the watches.

pub(crate) mod due;
mod reconcile;
pub(crate) mod repository;
pub(crate) mod run;
pub(crate) mod select;
pub(crate) mod status;

use std::time::Duration;

use flux_runtime::duration;
use flux_runtime::error::{Retry, StepError};

use crate::api::conditions::reason;
use crate::policy::PolicyError;
use crate::registry::ImageError;

/// Why an ImagePolicy has no (new) latest image, with Flux's messages and reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PolicyFailure {
    #[error(
        "failed to get the referred ImageRepository: cannot access 'ImageRepository/{namespace}/{name}', cross-namespace references have been blocked"
    )]
    CrossNamespaceBlocked { namespace: String, name: String },
    /// After the colon: the not-found error of controller-runtime's cache, which Flux reads
    /// through (the kind where the API server would say the resource).
    #[error(
        "failed to get the referred ImageRepository: referenced ImageRepository does not exist: ImageRepository.image.toolkit.fluxcd.io \"{name}\" not found"
    )]
    RepositoryNotFound { name: String },
    /// Reading the repository or the policy namespace failed otherwise.
    #[error("failed to get the referred ImageRepository: {0}")]
    RepositoryRead(String),
    #[error(
        "failed to get the referred ImageRepository: access denied: '{namespace}/{name}' can't be accessed due to missing ACL labels on 'accessFrom'"
    )]
    AclMissing { namespace: String, name: String },
    #[error(
        "failed to get the referred ImageRepository: access denied: '{namespace}/{name}' can't be accessed due to ACL labels mismatch on namespace '{policy_namespace}'"
    )]
    AclMismatch {
        namespace: String,
        name: String,
        policy_namespace: String,
    },
    /// The repository's image does not parse (the parser's message).
    #[error("{0}")]
    ImageUrlInvalid(String),
    #[error(
        "to use spec.serviceAccountName in the ImageRepository for provider authentication please enable the ObjectLevelWorkloadIdentity feature gate in the controller"
    )]
    FeatureGateDisabled,
    /// Only without the CRD's CEL rules (an API server that skips them).
    #[error("spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'")]
    IntervalNotConfigured,
    #[error("{0}")]
    Policy(#[from] PolicyError),
    /// The store holds no tags for the repository (not scanned yet, or a fresh store).
    #[error("no tags in database")]
    NoTags,
    #[error("failed to read tags from database: {0}")]
    StoreRead(String),
    /// `reference` is `name:tag`; `reason` is the auth or HEAD failure.
    #[error("failed fetching digest of {reference}: {reason}")]
    Digest { reference: String, reason: String },
}

impl From<ImageError> for PolicyFailure {
    fn from(e: ImageError) -> Self {
        PolicyFailure::ImageUrlInvalid(e.to_string())
    }
}

impl PolicyFailure {
    /// Flux sets Ready=False itself for every failure but the digest's, which reaches Ready
    /// through the result finalizer (reason `Failed`, and only over Ready=True or Unknown).
    pub(crate) fn marks_ready(&self) -> bool {
        !matches!(self, PolicyFailure::Digest { .. })
    }

    /// Checked before the reconcile marks itself in progress.
    fn precedes_progress(&self) -> bool {
        matches!(self, PolicyFailure::IntervalNotConfigured)
    }
}

impl StepError for PolicyFailure {
    fn reason(&self) -> &'static str {
        match self {
            Self::CrossNamespaceBlocked { .. } | Self::AclMissing { .. } | Self::AclMismatch { .. } => {
                reason::ACCESS_DENIED
            }
            Self::RepositoryNotFound { .. } | Self::NoTags => reason::DEPENDENCY_NOT_READY,
            Self::ImageUrlInvalid(_) => reason::IMAGE_URL_INVALID,
            Self::FeatureGateDisabled => reason::FEATURE_GATE_DISABLED,
            Self::IntervalNotConfigured => reason::INTERVAL_NOT_CONFIGURED,
            Self::Policy(e) if e.is_terminal() => reason::INVALID_POLICY,
            Self::Digest { .. } => reason::FAILED,
            Self::Policy(_) | Self::RepositoryRead(_) | Self::StoreRead(_) => reason::FAILURE,
        }
    }

    /// Flux hands repository, ACL, store, policy and digest failures back to the workqueue
    /// (the ACL may be allowed by a namespace label it does not watch), requeues an empty store
    /// at `--requeue-dependency`, and stalls on what only a spec change can fix.
    fn retry(&self) -> Retry {
        match self {
            Self::ImageUrlInvalid(_) | Self::FeatureGateDisabled | Self::IntervalNotConfigured => {
                Retry::Terminal
            }
            Self::Policy(e) if e.is_terminal() => Retry::Terminal,
            Self::NoTags => Retry::Dependency,
            _ => Retry::Backoff,
        }
    }

    fn condition_message(&self, requeue_dependency: Duration) -> String {
        match self {
            // Go rounds the delay to whole seconds before printing it.
            Self::NoTags => format!(
                "retrying in {} error: {self}",
                duration::format(Duration::from_secs(
                    (requeue_dependency.as_secs_f64().round()) as u64
                ))
            ),
            _ => self.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_retries_and_messages_are_fluxs() {
        let dependency = Duration::from_secs(30);
        let cases: Vec<(PolicyFailure, &str, Retry, &str)> = vec![
            (
                PolicyFailure::RepositoryNotFound {
                    name: "podinfo".into(),
                },
                "DependencyNotReady",
                Retry::Backoff,
                "failed to get the referred ImageRepository: referenced ImageRepository does not exist: ImageRepository.image.toolkit.fluxcd.io \"podinfo\" not found",
            ),
            (
                PolicyFailure::RepositoryRead("namespaces \"apps\" is forbidden".into()),
                "Failure",
                Retry::Backoff,
                "failed to get the referred ImageRepository: namespaces \"apps\" is forbidden",
            ),
            (
                PolicyFailure::NoTags,
                "DependencyNotReady",
                Retry::Dependency,
                "retrying in 30s error: no tags in database",
            ),
            (
                PolicyFailure::Policy(PolicyError::InvalidPolicy(
                    "given ImagePolicyChoice object is invalid".into(),
                )),
                "InvalidPolicy",
                Retry::Terminal,
                "invalid policy: given ImagePolicyChoice object is invalid",
            ),
            (
                PolicyFailure::Policy(PolicyError::NoMatch),
                "Failure",
                Retry::Backoff,
                "unable to determine latest version from provided list",
            ),
            (
                PolicyFailure::StoreRead("disk gone".into()),
                "Failure",
                Retry::Backoff,
                "failed to read tags from database: disk gone",
            ),
            (
                PolicyFailure::IntervalNotConfigured,
                "IntervalNotConfigured",
                Retry::Terminal,
                "spec.interval must be set when spec.digestReflectionPolicy is set to 'Always'",
            ),
            (
                PolicyFailure::FeatureGateDisabled,
                "FeatureGateDisabled",
                Retry::Terminal,
                "to use spec.serviceAccountName in the ImageRepository for provider authentication please enable the ObjectLevelWorkloadIdentity feature gate in the controller",
            ),
            (
                PolicyFailure::Digest {
                    reference: "reg/app:1.0.0".into(),
                    reason: "boom".into(),
                },
                "Failed",
                Retry::Backoff,
                "failed fetching digest of reg/app:1.0.0: boom",
            ),
        ];
        for (failure, reason, retry, message) in cases {
            assert_eq!(failure.reason(), reason, "{failure:?}");
            assert_eq!(failure.retry(), retry, "{failure:?}");
            assert_eq!(failure.condition_message(dependency), message);
        }
    }

    #[test]
    fn the_dependency_delay_is_printed_as_go_rounds_it() {
        let message = |d| PolicyFailure::NoTags.condition_message(d);
        assert_eq!(
            message(Duration::from_millis(90_600)),
            "retrying in 1m31s error: no tags in database"
        );
        assert_eq!(
            message(Duration::from_secs(3600)),
            "retrying in 1h0m0s error: no tags in database"
        );
    }
}
