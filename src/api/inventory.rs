//! The inventory Flux keeps in `status.inventory`: one `{id, v}` entry per applied object.
//!
//! The id is cli-utils' `ObjMetadata` string, `<namespace>_<name>_<group>_<kind>`, with `:` in
//! the names of RBAC kinds written as `__`. Keeping the format exact lets `flux` and existing
//! inventories keep working after an image swap.

use std::fmt;

use kustomize::gvk::split_api_version;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The inventory of a Kustomization: what the last successful apply owns.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ResourceInventory {
    /// Entries of Kubernetes resource object references.
    pub entries: Vec<ResourceRef>,
}

/// One inventory entry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct ResourceRef {
    /// The object id: `<namespace>_<name>_<group>_<kind>`.
    pub id: String,
    /// The API version of the object (without the group).
    pub v: String,
}

/// The identity of an object, independent of its API version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

/// Errors when reading an inventory id written by someone else.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InventoryIdError {
    #[error("inventory id '{0}' is not of the form <namespace>_<name>_<group>_<kind>")]
    Malformed(String),
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const RBAC_KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];

fn is_rbac(group: &str, kind: &str) -> bool {
    group == RBAC_GROUP && RBAC_KINDS.contains(&kind)
}

impl ObjectRef {
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The identity of a manifest, as written (no namespace defaulted).
    pub fn of(object: &serde_json::Value) -> Self {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        };
        let (group, _) = split_api_version(text("/apiVersion"));
        Self::new(
            group,
            text("/kind"),
            text("/metadata/namespace"),
            text("/metadata/name"),
        )
    }

    /// The inventory id of this object.
    pub fn id(&self) -> String {
        let name = if is_rbac(&self.group, &self.kind) {
            self.name.replace(':', "__")
        } else {
            self.name.clone()
        };
        format!("{}_{}_{}_{}", self.namespace, name, self.group, self.kind)
    }

    /// Parses an inventory id. The namespace runs to the first `_`, the kind follows the last
    /// `_`, the group sits between the last two; the name is what remains.
    pub fn parse_id(id: &str) -> Result<Self, InventoryIdError> {
        let malformed = || InventoryIdError::Malformed(id.to_string());
        let (namespace, rest) = id.split_once('_').ok_or_else(malformed)?;
        let (rest, kind) = rest.rsplit_once('_').ok_or_else(malformed)?;
        let (name, group) = rest.rsplit_once('_').ok_or_else(malformed)?;
        if kind.is_empty() || name.is_empty() {
            return Err(malformed());
        }
        let name = if is_rbac(group, kind) {
            name.replace("__", ":")
        } else {
            name.to_string()
        };
        Ok(Self::new(group, kind, namespace, &name))
    }

    /// The inventory entry for this object at the given `apiVersion` (`group/version` or `v1`).
    pub fn to_entry(&self, api_version: &str) -> ResourceRef {
        let (_, version) = split_api_version(api_version);
        ResourceRef {
            id: self.id(),
            v: version.to_string(),
        }
    }

    /// `apiVersion` for a version found in an inventory entry.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }
}

/// `Kind/namespace/name`, or `Kind/name` when cluster-scoped: the form used in change sets,
/// events and error messages.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

impl ResourceRef {
    pub fn object_ref(&self) -> Result<ObjectRef, InventoryIdError> {
        ObjectRef::parse_id(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ids as Flux writes them: `<namespace>_<name>_<group>_<kind>`, empty parts kept.
    #[test]
    fn encodes_flux_ids() {
        let cases = [
            (ObjectRef::new("", "Namespace", "", "my-ns"), "_my-ns__Namespace"),
            (
                ObjectRef::new("", "Service", "default", "podinfo"),
                "default_podinfo__Service",
            ),
            (
                ObjectRef::new("apps", "Deployment", "apps", "web"),
                "apps_web_apps_Deployment",
            ),
            (
                ObjectRef::new(RBAC_GROUP, "ClusterRole", "", "system:aggregate-to-edit"),
                "_system__aggregate-to-edit_rbac.authorization.k8s.io_ClusterRole",
            ),
        ];
        for (object, id) in cases {
            assert_eq!(object.id(), id, "{object:?}");
        }
    }

    #[test]
    fn colons_are_encoded_only_for_rbac_kinds() {
        let cm = ObjectRef::new("", "ConfigMap", "ns", "a:b");
        assert_eq!(cm.id(), "ns_a:b__ConfigMap");
        assert_eq!(ObjectRef::parse_id(&cm.id()).unwrap(), cm);
    }

    #[test]
    fn round_trips() {
        let cases = [
            ObjectRef::new("", "Namespace", "", "my-ns"),
            ObjectRef::new("apps", "Deployment", "apps", "web"),
            ObjectRef::new("", "ConfigMap", "default", "name_with_underscores"),
            ObjectRef::new(RBAC_GROUP, "RoleBinding", "team", "system:controller:x"),
            ObjectRef::new(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "",
                "foos.example.com",
            ),
            ObjectRef::new("cert-manager.io", "Certificate", "ns", "a.b-c"),
        ];
        for obj in cases {
            assert_eq!(ObjectRef::parse_id(&obj.id()).unwrap(), obj, "{}", obj.id());
        }
    }

    #[test]
    fn parses_names_containing_underscores() {
        let parsed = ObjectRef::parse_id("ns_my_config__ConfigMap").unwrap();
        assert_eq!(parsed, ObjectRef::new("", "ConfigMap", "ns", "my_config"));
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in ["", "noseparators", "ns_name", "ns__group_"] {
            assert!(ObjectRef::parse_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn entries_carry_the_version_only() {
        let obj = ObjectRef::new("apps", "Deployment", "apps", "web");
        assert_eq!(
            obj.to_entry("apps/v1"),
            ResourceRef {
                id: "apps_web_apps_Deployment".into(),
                v: "v1".into()
            }
        );
        assert_eq!(obj.api_version("v1"), "apps/v1");
        assert_eq!(ObjectRef::new("", "Service", "a", "b").to_entry("v1").v, "v1");
    }

    #[test]
    fn displays_like_flux_change_sets() {
        assert_eq!(
            ObjectRef::new("", "Namespace", "", "apps").to_string(),
            "Namespace/apps"
        );
        assert_eq!(
            ObjectRef::new("apps", "Deployment", "apps", "web").to_string(),
            "Deployment/apps/web"
        );
    }
}
