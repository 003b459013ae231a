//! Condition types and reasons with Flux's exact strings: alerts, dashboards and `flux` match on
//! them. Those every Flux object carries are the runtime's (`flux_runtime::conditions`).

pub use flux_runtime::conditions::{READY, RECONCILING, STALLED};

/// Condition reasons of image reflection, besides the runtime's (`Succeeded`, `Progressing`,
/// `ProgressingWithRetry`).
pub mod reason {
    pub use flux_runtime::conditions::reason::{PROGRESSING, PROGRESSING_WITH_RETRY, SUCCEEDED};
    /// An ImageRepository's image is not a repository name (scheme, tag, bad syntax).
    pub const IMAGE_URL_INVALID: &str = "ImageURLInvalid";
    /// An ImagePolicy's repository is missing or has no tags yet.
    pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    /// Credentials, TLS or proxy settings could not be built.
    pub const AUTHENTICATION_FAILED: &str = "AuthenticationFailed";
    /// The registry could not be read (or the tags not stored).
    pub const READ_OPERATION_FAILED: &str = "ReadOperationFailed";
    /// `digestReflectionPolicy: Always` without `interval`.
    pub const INTERVAL_NOT_CONFIGURED: &str = "IntervalNotConfigured";
    /// A policy or tag filter that cannot be evaluated.
    pub const INVALID_POLICY: &str = "InvalidPolicy";
    /// Cross-namespace access refused by the repository's ACL or `--no-cross-namespace-refs`.
    pub const ACCESS_DENIED: &str = "AccessDenied";
    /// The object-level workload identity gate is off.
    pub const FEATURE_GATE_DISABLED: &str = "FeatureGateDisabled";
    /// `spec.provider` names a cloud whose contextual login this controller does not do
    /// (Flux's source-controller reason for a provider setting that cannot work).
    pub const INVALID_PROVIDER_CONFIGURATION: &str = "InvalidProviderConfiguration";
    /// A reconcile step failed without a more specific reason.
    pub const FAILURE: &str = "Failure";
    /// Ready turned False by the result finalizer after an error without its own reason.
    pub const FAILED: &str = "Failed";
}
