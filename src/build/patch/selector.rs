//! Patch target selection (kustomize `types.Selector` and `resmap.Select`): the shared
//! [`CompiledSelector`] with kustomize's namespace rule (effective namespaces, original ids).

use serde_json::{Map, Value};

use super::PatchError;
use crate::api::kustomization::Selector;
use crate::api::selector::{CompiledSelector, Namespacing, OriginalId};
use crate::build::resmap::str_at;

/// Cluster-scoped builtin kinds (Kubernetes 1.21 schema). Every other kind, including
/// cluster-scoped custom resources, counts as namespaced, as in kustomize.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ComponentStatus",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

/// Whether kustomize knows `kind` as cluster-scoped.
pub fn is_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// A patch target compiled once (as kustomize does), so testing every object of a build
/// costs no regex compilation.
pub struct Target(CompiledSelector);

impl Target {
    /// Compiles `selector`; a bad regex or label selector names its field.
    pub fn compile(selector: &Selector) -> Result<Self, PatchError> {
        CompiledSelector::compile(selector)
            .map(Target)
            .map_err(|err| PatchError::Selector {
                field: err.field.to_string(),
                reason: err.problem.to_string(),
            })
    }

    /// Whether this target selects `object`, matching name and namespace against the
    /// current or the `original` identity (kustomize's effective namespaces).
    pub fn selects(&self, object: &Map<String, Value>, original: Option<OriginalId<'_>>) -> bool {
        let cluster_scoped = is_cluster_scoped(str_at(object, &["kind"]));
        self.0.matches(
            object,
            Namespacing::Kustomize {
                cluster_scoped,
                original,
            },
        )
    }
}
