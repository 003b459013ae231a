//! namePrefix / nameSuffix. References to renamed objects are fixed later by nameref.

use serde_json::Value;

use crate::file::FieldSpec;
use crate::resmap::ResMap;

use super::{selects, set_at};

/// Kinds kustomize never prefixes or suffixes.
pub(crate) fn skipped(group: &str, kind: &str) -> bool {
    kind == "CustomResourceDefinition"
        || kind == "Namespace"
        || (group == "apiregistration.k8s.io" && kind == "APIService")
}

/// Adds `prefix` and then `suffix` (either may be empty) to every object's name, as the
/// `namePrefix` and `nameSuffix` fields do (two renames, each remembered).
pub(crate) fn apply(map: &mut ResMap, prefix: &str, suffix: &str) {
    let name = [FieldSpec {
        path: "metadata/name".into(),
        ..FieldSpec::default()
    }];
    apply_specs(map, prefix, "", &name);
    apply_specs(map, "", suffix, &name);
}

/// Adds `prefix` and `suffix` to the string at every field spec that selects an object's
/// original id; at `metadata/name` that renames the object (remembered for references).
pub(crate) fn apply_specs(map: &mut ResMap, prefix: &str, suffix: &str, specs: &[FieldSpec]) {
    if prefix.is_empty() && suffix.is_empty() {
        return;
    }
    map.each(|res| {
        let orig = res.orig.clone();
        if skipped(&orig.group, &orig.kind) {
            return;
        }
        for spec in specs.iter().filter(|s| selects(s, &orig)) {
            if spec.path == "metadata/name" {
                res.set_name(format!("{prefix}{}{suffix}", res.id().name));
                if !prefix.is_empty() {
                    res.prefixes.push(prefix.to_string());
                }
                if !suffix.is_empty() {
                    res.suffixes.push(suffix.to_string());
                }
                continue;
            }
            res.edit(|obj| {
                set_at(obj, spec, &|v| {
                    if let Value::String(s) = v {
                        *s = format!("{prefix}{s}{suffix}");
                    }
                })
            });
        }
    });
}
