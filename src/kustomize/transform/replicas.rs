//! `replicas:`: sets spec/replicas on workloads by name (current or any earlier name).

use serde_json::Value;

use crate::kustomize::BuildError;
use crate::kustomize::file::{FieldSpec, Replica};
use crate::kustomize::resmap::ResMap;

const KINDS: &[&str] = &["Deployment", "ReplicationController", "ReplicaSet", "StatefulSet"];

/// Applies one `replicas` entry; an entry that names no object is an error, as in kustomize.
/// `extra` are the `replicas` field specs of `configurations`.
pub(crate) fn apply(
    map: &mut ResMap,
    replica: &Replica,
    file: &str,
    extra: &[FieldSpec],
) -> Result<(), BuildError> {
    let mut matched = crate::kustomize::configurations::replicas(map, &replica.name, replica.count, extra);
    map.each(|res| {
        if !res.any_id(|id| id.name == replica.name) {
            return;
        }
        matched = true;
        if KINDS.contains(&res.id().kind.as_str()) {
            let spec = res
                .obj_mut()
                .entry("spec")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(spec) = spec {
                spec.insert("replicas".into(), Value::from(replica.count));
            }
        }
    });
    if !matched {
        return Err(BuildError::Transform {
            file: file.into(),
            field: "replicas".into(),
            message: format!(
                "resource with name {} does not match a config with the following GVK {:?}",
                replica.name, KINDS
            ),
        });
    }
    Ok(())
}
