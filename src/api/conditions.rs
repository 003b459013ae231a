//! Condition types and reasons, with Flux's exact strings: alerts, dashboards and `flux` match
//! on them.

/// The object is ready: the last reconcile applied the source revision (normal-true).
pub const READY: &str = "Ready";
/// A reconcile is running, or the last one failed and will be retried (abnormal-true).
pub const RECONCILING: &str = "Reconciling";
/// The object cannot make progress until its spec changes (abnormal-true).
pub const STALLED: &str = "Stalled";
/// The applied objects passed their health checks (normal-true).
pub const HEALTHY: &str = "Healthy";

/// The conditions this controller owns; written with force so nobody else keeps them.
pub const OWNED: [&str; 4] = [HEALTHY, READY, RECONCILING, STALLED];

/// Condition reasons.
pub mod reason {
    pub const PROGRESSING: &str = "Progressing";
    pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";
    pub const RECONCILIATION_SUCCEEDED: &str = "ReconciliationSucceeded";
    pub const RECONCILIATION_FAILED: &str = "ReconciliationFailed";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const ARTIFACT_FAILED: &str = "ArtifactFailed";
    pub const DIRECTORY_CREATION_FAILED: &str = "DirectoryCreationFailed";
    pub const ACCESS_DENIED: &str = "AccessDenied";
    pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    pub const INVALID_CEL_EXPRESSION: &str = "InvalidCELExpression";
    pub const FEATURE_GATE_DISABLED: &str = "FeatureGateDisabled";
    pub const BUILD_FAILED: &str = "BuildFailed";
    pub const PRUNE_FAILED: &str = "PruneFailed";
    pub const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";
    pub const HEALTH_CHECK_CANCELED: &str = "HealthCheckCanceled";
    /// Event reason for a reconcile that is waiting on its dependencies.
    pub const DEPENDENCY_NOT_READY_EVENT: &str = DEPENDENCY_NOT_READY;
}

/// Label and annotation keys read or written by the controller.
pub mod keys {
    /// Owner labels stamped on every applied object.
    pub const NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
    pub const NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
    /// Per-object apply policy: `Ignore`, `IfNotPresent`, `Merge` or `Override`.
    pub const SSA_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/ssa";
    pub const PRUNE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/prune";
    pub const RECONCILE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/reconcile";
    pub const FORCE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/force";
    pub const SUBSTITUTE_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/substitute";
    pub const DECRYPT_ANNOTATION: &str = "kustomize.toolkit.fluxcd.io/decrypt";
    /// Set by `flux reconcile` to ask for a run now.
    pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
    pub const FINALIZER: &str = "finalizers.fluxcd.io";
    /// Field manager of applied objects.
    pub const APPLY_FIELD_MANAGER: &str = "kustomize-controller";
    /// Field manager of status writes.
    pub const STATUS_FIELD_MANAGER: &str = "gotk-kustomize-controller";
}
