//! Condition types and reasons, with Flux's exact strings: alerts, dashboards and `flux` match
//! on them. Those every Flux object carries are the runtime's (`flux_runtime::conditions`).

/// The object is ready: the last reconcile applied the source revision (normal-true).
pub use flux_runtime::conditions::READY;
pub(crate) use flux_runtime::conditions::RECONCILING;
/// The applied objects passed their health checks (normal-true).
pub(crate) const HEALTHY: &str = "Healthy";

/// Condition reasons.
pub mod reason {
    pub(crate) use flux_runtime::conditions::reason::{
        PROGRESSING, PROGRESSING_WITH_RETRY, RECONCILIATION_FAILED, RECONCILIATION_SUCCEEDED, SUCCEEDED,
    };
    pub(crate) const ARTIFACT_FAILED: &str = "ArtifactFailed";
    pub(crate) const DIRECTORY_CREATION_FAILED: &str = "DirectoryCreationFailed";
    pub(crate) const ACCESS_DENIED: &str = "AccessDenied";
    pub(crate) const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    pub(crate) const INVALID_CEL_EXPRESSION: &str = "InvalidCELExpression";
    pub(crate) const BUILD_FAILED: &str = "BuildFailed";
    pub(crate) const PRUNE_FAILED: &str = "PruneFailed";
    pub(crate) const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
    pub(crate) const HEALTH_CHECK_CANCELED: &str = "HealthCheckCanceled";
    /// Event reason for a reconcile that is waiting on its dependencies.
    pub(crate) const DEPENDENCY_NOT_READY_EVENT: &str = DEPENDENCY_NOT_READY;
}

/// Label and annotation keys read or written by the controller.
pub mod keys {
    /// Owner labels stamped on every applied object.
    pub(crate) const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
    pub(crate) const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
    /// Per-object apply policy: `Ignore`, `IfNotPresent`, `Merge` or `Override`.
    pub(crate) const SSA_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/ssa";
    pub(crate) const PRUNE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/prune";
    pub(crate) const RECONCILE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/reconcile";
    pub(crate) const FORCE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/force";
    pub(crate) const SUBSTITUTE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/substitute";
    /// On a Kustomization (ours, not Flux's): `correct` corrects an out-of-band change of its
    /// objects at once, `warn` only reports it; absent, drift is corrected at the interval.
    pub(crate) const DRIFT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/drift";
    /// Set by `flux reconcile` to ask for a run now.
    pub(crate) use flux_runtime::triggers::REQUESTED_AT_ANNOTATION;
    pub(crate) const FINALIZER: &str = "finalizers.fluxcd.io";
    /// Field manager of applied objects (that of status writes is the controller identity's).
    pub(crate) const APPLY_FIELD_MANAGER: &str = "kustomize-controller";
}
