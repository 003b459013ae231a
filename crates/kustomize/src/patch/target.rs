//! Patch target selection (kustomize `types.Selector` and `resmap.Select`): the shared
//! [`CompiledSelector`] with kustomize's namespace rule (effective namespaces, original ids).

use serde_json::{Map, Value};

use super::PatchError;
use crate::gvk::split_api_version;
use crate::resmap::{is_cluster_scoped, str_at};
use crate::selector::{CompiledSelector, Namespacing, OriginalId, Selector};

/// A patch target compiled once (as kustomize does), so testing every object of a build
/// costs no regex compilation.
pub(crate) struct Target(CompiledSelector);

impl Target {
    /// Compiles `selector`; a bad regex or label selector names its field.
    pub(crate) fn compile(selector: &Selector) -> Result<Self, PatchError> {
        CompiledSelector::compile(selector)
            .map(Target)
            .map_err(|err| PatchError::Selector {
                field: err.field.to_string(),
                reason: err.problem.to_string(),
            })
    }

    /// Whether this target selects `object`, matching name and namespace against the
    /// current or the `original` identity (kustomize's effective namespaces).
    pub(crate) fn selects(&self, object: &Map<String, Value>, original: Option<OriginalId<'_>>) -> bool {
        let (group, version) = split_api_version(str_at(object, &["apiVersion"]));
        let cluster_scoped = is_cluster_scoped(group, version, str_at(object, &["kind"]));
        self.0.matches(
            object,
            Namespacing::Kustomize {
                cluster_scoped,
                original,
            },
        )
    }
}
