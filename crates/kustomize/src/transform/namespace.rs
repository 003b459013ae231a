//! The namespace transformer (`namespace:` or a NamespaceTransformer config): namespaced
//! objects move, cluster-scoped ones stay, a v1 Namespace object is renamed, RoleBinding
//! subjects follow as the subject mode says, and further field specs get the namespace.

use serde_json::Value;

use crate::file::FieldSpec;
use crate::resmap::{ResMap, is_cluster_scoped};

use super::{selects, set_at};

/// Which RoleBinding/ClusterRoleBinding subjects get the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Subjects {
    /// Subjects named `default` (kustomize's default mode).
    DefaultOnly,
    /// Every ServiceAccount subject.
    AllServiceAccounts,
    /// None.
    None,
}

/// One namespace transformation.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) namespace: String,
    /// Fields besides `metadata/namespace` (which every namespaced object gets) that take
    /// the namespace; `metadata/name` counts only for a `v1` object (the Namespace itself).
    pub(crate) field_specs: Vec<FieldSpec>,
    /// Set only fields that are missing or empty.
    pub(crate) unset_only: bool,
    pub(crate) subjects: Subjects,
}

fn fs(group: &str, kind: &str, path: &str, create: bool) -> FieldSpec {
    FieldSpec {
        group: group.into(),
        kind: kind.into(),
        path: path.into(),
        create,
        ..FieldSpec::default()
    }
}

/// Sets `namespace` on every object that kustomize's `namespace:` field would.
pub(crate) fn apply(map: &mut ResMap, namespace: &str) {
    let options = Options {
        namespace: namespace.to_string(),
        field_specs: vec![
            fs("", "Namespace", "metadata/name", true),
            fs(
                "apiregistration.k8s.io",
                "APIService",
                "spec/service/namespace",
                true,
            ),
            fs(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "spec/conversion/webhook/clientConfig/service/namespace",
                false,
            ),
        ],
        unset_only: false,
        subjects: Subjects::DefaultOnly,
    };
    apply_with(map, &options);
}

/// Applies one namespace transformation to every object.
pub(crate) fn apply_with(map: &mut ResMap, options: &Options) {
    let namespace = options.namespace.as_str();
    let wanted = |current: &str| !options.unset_only || current.is_empty();
    map.each(|res| {
        let id = res.id();
        if !is_cluster_scoped(&id.group, &id.version, &id.kind) && wanted(&id.namespace) {
            res.set_namespace(namespace);
        }
        let binding = id.kind == "RoleBinding" || id.kind == "ClusterRoleBinding";
        if binding && let Some(Value::Array(subjects)) = res.obj_mut().get_mut("subjects") {
            for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
                let field = |key: &str| subject.get(key).and_then(Value::as_str).unwrap_or_default();
                let selected = match options.subjects {
                    Subjects::DefaultOnly => field("name") == "default",
                    Subjects::AllServiceAccounts => field("kind") == "ServiceAccount",
                    Subjects::None => false,
                };
                if selected && wanted(field("namespace")) {
                    subject.insert("namespace".into(), Value::String(namespace.to_string()));
                }
            }
        }
        let v1 = id.group.is_empty() && id.version == "v1";
        for spec in options.field_specs.iter().filter(|s| selects(s, &id)) {
            match spec.path.as_str() {
                "metadata/namespace" => continue,
                "subjects" if binding => continue,
                "metadata/name" if !v1 => continue,
                "metadata/name" => {
                    if wanted(&id.name) {
                        res.set_name(namespace.to_string());
                    }
                    continue;
                }
                _ => {}
            }
            res.edit(|obj| {
                set_at(obj, spec, &|v| {
                    if wanted(v.as_str().unwrap_or_default()) {
                        *v = Value::String(namespace.to_string());
                    }
                })
            });
        }
    });
}
