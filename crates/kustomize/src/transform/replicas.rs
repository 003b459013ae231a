//! `replicas:` (or a ReplicaCountTransformer config): sets the count on workloads by name
//! (current or any earlier name) at field specs.

use serde_json::Value;

use crate::error::BuildError;
use crate::file::{FieldSpec, Replica};
use crate::resmap::ResMap;

use super::{change_at, selects};

const KINDS: &[&str] = &["Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"];

/// Applies one `replicas` entry; an entry that names no object is an error, as in kustomize.
/// `extra` are the `replicas` field specs of `configurations`, which join the builtin ones.
pub(crate) fn apply(
    map: &mut ResMap,
    replica: &Replica,
    file: &str,
    extra: &[FieldSpec],
) -> Result<(), BuildError> {
    let specs: Vec<FieldSpec> = KINDS
        .iter()
        .map(|kind| FieldSpec {
            kind: (*kind).into(),
            path: "spec/replicas".into(),
            create: true,
            ..FieldSpec::default()
        })
        .chain(extra.iter().filter(|s| !s.kind.is_empty()).cloned())
        .collect();
    apply_specs(map, replica, &specs, file)
}

/// Applies one replica entry at `specs`: an object is selected when one of its ids has the
/// entry's name and passes a spec's kind filter; selecting nothing is an error.
pub(crate) fn apply_specs(
    map: &mut ResMap,
    replica: &Replica,
    specs: &[FieldSpec],
    file: &str,
) -> Result<(), BuildError> {
    let mut matched = false;
    map.each(|res| {
        for spec in specs {
            if !res.any_id(|id| id.name == replica.name && selects(spec, id)) {
                continue;
            }
            matched = true;
            change_at(res, spec, &|v| *v = Value::from(replica.count));
        }
    });
    if !matched {
        let gvks: Vec<String> = specs.iter().map(gvk_text).collect();
        return Err(BuildError::Transform {
            file: file.into(),
            field: "replicas".into(),
            message: format!(
                "resource with name {} does not match a config with the following GVK [{}]",
                replica.name,
                gvks.join(" ")
            ),
        });
    }
    Ok(())
}

/// kustomize's text of a field spec's GVK filter (`Deployment.[noVer].[noGrp]`).
fn gvk_text(spec: &FieldSpec) -> String {
    let part = |s: &str, empty: &'static str| {
        if s.is_empty() {
            empty.to_string()
        } else {
            s.to_string()
        }
    };
    format!(
        "{}.{}.{}",
        part(&spec.kind, "[noKind]"),
        part(&spec.version, "[noVer]"),
        part(&spec.group, "[noGrp]")
    )
}
