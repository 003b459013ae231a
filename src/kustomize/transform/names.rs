//! namePrefix / nameSuffix. References to renamed objects are fixed later by nameref.

use crate::kustomize::resmap::ResMap;

/// Kinds kustomize never prefixes or suffixes.
pub(crate) fn skipped(group: &str, kind: &str) -> bool {
    kind == "CustomResourceDefinition"
        || kind == "Namespace"
        || (group == "apiregistration.k8s.io" && kind == "APIService")
}

/// Adds `prefix` and `suffix` (either may be empty) to every object's name.
pub(crate) fn apply(map: &mut ResMap, prefix: &str, suffix: &str) {
    if prefix.is_empty() && suffix.is_empty() {
        return;
    }
    map.each(|res| {
        let id = res.id();
        if skipped(&id.group, &id.kind) {
            return;
        }
        if !prefix.is_empty() {
            res.set_name(format!("{prefix}{}", id.name));
            res.prefixes.push(prefix.to_string());
        }
        if !suffix.is_empty() {
            let current = res.id().name;
            res.set_name(format!("{current}{suffix}"));
            res.suffixes.push(suffix.to_string());
        }
    });
}
