//! The `image.toolkit.fluxcd.io` API: `ImageRepository` and `ImagePolicy`, field for field as
//! Flux's image-reflector-controller v1.2 serves them (`v1`, the storage version), also served
//! as the deprecated `v1beta2` with the same schema, as Flux v1.0 and v1.1 did. No I/O here.

pub mod conditions;
pub mod crd;
pub mod image_policy;
pub mod image_repository;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use image_policy::{ImagePolicy, ImagePolicySpec, ImagePolicyStatus};
pub use image_repository::{ImageRepository, ImageRepositorySpec, ImageRepositoryStatus};

/// The API group of both kinds.
pub const GROUP: &str = "image.toolkit.fluxcd.io";

/// The finalizer both kinds carry (Flux's `ImageFinalizer`).
pub const FINALIZER: &str = "finalizers.fluxcd.io";

/// Go `time.Duration` strings as the CRDs accept them (`ms`, `s`, `m`, `h`).
pub use flux_runtime::duration::DURATION_PATTERN;

/// An ImageRepository's `timeout`: Flux leaves out `h`.
pub const TIMEOUT_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$";

/// A reference to an object in the same namespace (`meta.LocalObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectReference {
    /// Name of the referent.
    pub name: String,
}

/// A reference to an object in any namespace (`meta.NamespacedObjectReference`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct NamespacedObjectReference {
    /// Name of the referent.
    pub name: String,
    /// Namespace of the referent, when not specified it acts as LocalObjectReference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// AccessFrom defines an Access Control List for allowing cross-namespace references to a
/// source object based on Kubernetes namespace selectors (`acl.AccessFrom`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessFrom {
    /// NamespaceSelectors is the list of namespace selectors to which this ACL applies. Items
    /// in this list are evaluated using a logical OR operation.
    pub namespace_selectors: Vec<NamespaceSelector>,
}

/// NamespaceSelector selects the namespaces to which this ACL applies. An empty map of
/// MatchLabels matches all namespaces in a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    /// MatchLabels is a map of {key,value} pairs. A single {key,value} in the matchLabels map
    /// is equivalent to an element of matchExpressions, whose key field is "key", the operator
    /// is "In", and the values array contains only "value". The requirements are ANDed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}

/// Go's `omitempty` bools: `false` is the same as absent.
fn is_false(value: &bool) -> bool {
    !*value
}

/// `status.observedGeneration` before the first reconcile: the status default that makes
/// kstatus report a fresh object as InProgress.
fn unobserved() -> i64 {
    -1
}

/// Not written while unobserved: the CRD's status default says -1 already, and a field
/// default (which a written -1 would bring into the schema) is not Flux's.
fn is_unobserved(generation: &i64) -> bool {
    *generation == unobserved()
}
