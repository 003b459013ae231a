//! The namespace transformer (`namespace:`): namespaced objects move, cluster-scoped ones
//! stay, a v1 Namespace object is renamed, and RoleBinding subjects named `default` follow.

use serde_json::Value;

use crate::kustomize::resmap::{ResMap, is_cluster_scoped};

use super::{path_segments, visit_path};

/// Sets `namespace` on every object that kustomize would.
pub(crate) fn apply(map: &mut ResMap, namespace: &str) {
    map.each(|res| {
        let id = res.id();
        if !is_cluster_scoped(&id.group, &id.version, &id.kind) {
            res.set_namespace(namespace);
        }
        if id.kind == "Namespace" && id.group.is_empty() && id.version == "v1" {
            res.set_name(namespace.to_string());
        }
        let rbac = id.group == "rbac.authorization.k8s.io"
            && (id.kind == "RoleBinding" || id.kind == "ClusterRoleBinding");
        if rbac && let Some(Value::Array(subjects)) = res.obj_mut().get_mut("subjects") {
            for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
                if subject.get("name").and_then(Value::as_str) == Some("default") {
                    subject.insert("namespace".into(), Value::String(namespace.to_string()));
                }
            }
        }
        let extra = match (id.group.as_str(), id.kind.as_str()) {
            ("apiregistration.k8s.io", "APIService") => Some(("spec/service/namespace", true)),
            ("apiextensions.k8s.io", "CustomResourceDefinition") => {
                Some(("spec/conversion/webhook/clientConfig/service/namespace", false))
            }
            _ => None,
        };
        if let Some((path, create)) = extra {
            let set = Value::String(namespace.to_string());
            res.edit(|obj| {
                let _ = visit_path::<()>(obj, &path_segments(path), create, &|| Value::Null, &mut |v| {
                    *v = set.clone();
                    Ok(())
                });
            });
        }
    });
}
