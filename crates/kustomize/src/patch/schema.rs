//! The schemas strategic merge patches follow: kustomize's builtin Kubernetes 1.21.2 schema,
//! or a kustomization's own `openapi` schema.
//!
//! kustomize (kyaml `merge2`) merges a list by key only where the schema carries
//! `x-kubernetes-patch-strategy: merge` with a merge key (or `x-kubernetes-list-map-keys`,
//! which win); every other list, and every list of a kind the schema does not know (custom
//! resources), is replaced as a whole. `replace` and `retainKeys` strategies are ignored by
//! kustomize, so maps always merge. Instead of embedding the 3 MB schema we model the few
//! types on the path to those fields: object metadata (finalizers, ownerReferences), status
//! conditions, the pod spec and its containers in every workload, Service ports, and the
//! lists of ServiceAccounts and webhook configurations ([`field`] lists them all).
//!
//! A kustomization's `openapi: {path: ...}` schema is a Swagger document (JSON or YAML) whose
//! `definitions` name their kinds in `x-kubernetes-group-version-kind` and whose properties
//! carry strategic-merge strategies. As in kustomize, such a schema replaces the builtin one
//! for every patch of the build: a kind it does not define has no merge keys, builtin kinds
//! included. A list merges by key only when its property has an
//! `x-kubernetes-patch-strategy` containing `merge`; the keys are its
//! `x-kubernetes-list-map-keys`, else its `x-kubernetes-patch-merge-key`, and without
//! either a list of scalars merges as a set. Fields and list items follow `$ref`s.
//!
//! Both schemas answer the same two questions, the type of a field and how a list under it
//! merges ([`SchemaType`], [`ListMerge`]), so they live in one file.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::gvk::split_api_version;

/// How a list field is merged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ListMerge<'s> {
    /// The patch list replaces the original (no strategy, or an unknown kind).
    Replace,
    /// Elements (maps) are matched on these keys and merged.
    ByKeys(Keys<'s>),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    Primitive,
}

/// The merge keys of a list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Keys<'s> {
    Builtin(&'static [&'static str]),
    /// A custom schema's key: a string or a list of strings.
    Custom(&'s Value),
}

impl<'s> Keys<'s> {
    pub(crate) fn names(self) -> Vec<&'s str> {
        match self {
            Keys::Builtin(keys) => keys.to_vec(),
            Keys::Custom(Value::String(key)) => vec![key.as_str()],
            Keys::Custom(keys) => keys
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
        }
    }
}

/// The schema type of a node, as far as merge strategies need to know it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SchemaType<'s> {
    /// A node of a custom schema (a definition or property schema).
    Custom(&'s CustomSchema, &'s Value),
    /// Not a builtin kind (or a part of one without merge strategies): lists are replaced.
    Unknown,
    /// The top level of a builtin kind.
    Root(BuiltinKind),
    ObjectMeta,
    /// `spec` of workloads that carry a pod `template`.
    WorkloadSpec,
    CronJobSpec,
    JobTemplateSpec,
    PodTemplateSpec,
    PodSpec,
    Container,
    ServiceSpec,
    /// `status` of a builtin kind (conditions by type).
    Status,
}

/// Builtin kinds whose fields matter for merge strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuiltinKind {
    Pod,
    PodTemplate,
    Workload,
    CronJob,
    Service,
    ServiceAccount,
    WebhookConfiguration,
    /// Any other kind of the builtin schema: only `metadata` lists merge.
    Other,
}

/// Builtin kinds per API group (Kubernetes 1.21 schema); anything else is a custom resource.
const BUILTIN_KINDS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        ],
    ),
    (
        "apps",
        &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
    ),
    ("batch", &["CronJob", "Job"]),
    ("autoscaling", &["HorizontalPodAutoscaler"]),
    (
        "policy",
        &["PodDisruptionBudget", "PodSecurityPolicy", "Eviction"],
    ),
    ("networking.k8s.io", &["Ingress", "IngressClass", "NetworkPolicy"]),
    (
        "extensions",
        &[
            "DaemonSet",
            "Deployment",
            "Ingress",
            "NetworkPolicy",
            "PodSecurityPolicy",
            "ReplicaSet",
        ],
    ),
    (
        "rbac.authorization.k8s.io",
        &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    ),
    (
        "storage.k8s.io",
        &[
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
        ],
    ),
    (
        "admissionregistration.k8s.io",
        &["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"],
    ),
    ("apiextensions.k8s.io", &["CustomResourceDefinition"]),
    ("apiregistration.k8s.io", &["APIService"]),
    ("scheduling.k8s.io", &["PriorityClass"]),
    ("coordination.k8s.io", &["Lease"]),
    ("certificates.k8s.io", &["CertificateSigningRequest"]),
    ("discovery.k8s.io", &["EndpointSlice"]),
    ("events.k8s.io", &["Event"]),
    ("node.k8s.io", &["RuntimeClass"]),
    (
        "flowcontrol.apiserver.k8s.io",
        &["FlowSchema", "PriorityLevelConfiguration"],
    ),
];

/// The schema type of an object's top level, from its `apiVersion` and `kind`, in the
/// custom schema when the build has one.
pub(crate) fn root_type<'s>(
    api_version: &str,
    kind: &str,
    custom: Option<&'s CustomSchema>,
) -> SchemaType<'s> {
    let (group, version) = split_api_version(api_version);
    if let Some(custom) = custom {
        return custom.root_type(group, version, kind);
    }
    let known = BUILTIN_KINDS
        .iter()
        .any(|(g, kinds)| *g == group && kinds.contains(&kind));
    if !known {
        return SchemaType::Unknown;
    }
    SchemaType::Root(match kind {
        "Pod" => BuiltinKind::Pod,
        "PodTemplate" => BuiltinKind::PodTemplate,
        "Deployment" | "DaemonSet" | "ReplicaSet" | "StatefulSet" | "Job" | "ReplicationController" => {
            BuiltinKind::Workload
        }
        "CronJob" => BuiltinKind::CronJob,
        "Service" => BuiltinKind::Service,
        "ServiceAccount" => BuiltinKind::ServiceAccount,
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            BuiltinKind::WebhookConfiguration
        }
        _ => BuiltinKind::Other,
    })
}

/// The type of `field` inside a node of type `parent`, and how the field merges if it is
/// a list.
pub(crate) fn field<'s>(parent: SchemaType<'s>, field: &str) -> (SchemaType<'s>, ListMerge<'s>) {
    use ListMerge::{Primitive, Replace};
    const fn keyed(keys: &'static [&'static str]) -> ListMerge<'static> {
        ListMerge::ByKeys(Keys::Builtin(keys))
    }
    use SchemaType as T;
    match (parent, field) {
        (T::Custom(schema, node), _) => schema.field(node, field),
        (T::Root(_), "metadata") => (T::ObjectMeta, Replace),
        (T::Root(_), "status") => (T::Status, Replace),
        (T::Root(BuiltinKind::Pod), "spec") => (T::PodSpec, Replace),
        (T::Root(BuiltinKind::PodTemplate), "template") => (T::PodTemplateSpec, Replace),
        (T::Root(BuiltinKind::Workload), "spec") => (T::WorkloadSpec, Replace),
        (T::Root(BuiltinKind::CronJob), "spec") => (T::CronJobSpec, Replace),
        (T::Root(BuiltinKind::Service), "spec") => (T::ServiceSpec, Replace),
        (T::Root(BuiltinKind::ServiceAccount), "secrets" | "imagePullSecrets") => {
            (T::Unknown, keyed(&["name"]))
        }
        (T::Root(BuiltinKind::WebhookConfiguration), "webhooks") => (T::Unknown, keyed(&["name"])),
        (T::ObjectMeta, "finalizers") => (T::Unknown, Primitive),
        (T::ObjectMeta, "ownerReferences") => (T::Unknown, keyed(&["uid"])),
        (T::Status, "conditions") => (T::Unknown, keyed(&["type"])),
        (T::WorkloadSpec, "template") => (T::PodTemplateSpec, Replace),
        (T::CronJobSpec, "jobTemplate") => (T::JobTemplateSpec, Replace),
        (T::JobTemplateSpec, "metadata") => (T::ObjectMeta, Replace),
        (T::JobTemplateSpec, "spec") => (T::WorkloadSpec, Replace),
        (T::PodTemplateSpec, "metadata") => (T::ObjectMeta, Replace),
        (T::PodTemplateSpec, "spec") => (T::PodSpec, Replace),
        (T::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            (T::Container, keyed(&["name"]))
        }
        (T::PodSpec, "volumes" | "imagePullSecrets") => (T::Unknown, keyed(&["name"])),
        (T::PodSpec, "hostAliases") => (T::Unknown, keyed(&["ip"])),
        (T::PodSpec, "topologySpreadConstraints") => {
            (T::Unknown, keyed(&["topologyKey", "whenUnsatisfiable"]))
        }
        (T::Container, "env") => (T::Unknown, keyed(&["name"])),
        (T::Container, "ports") => (T::Unknown, keyed(&["containerPort", "protocol"])),
        (T::Container, "volumeMounts") => (T::Unknown, keyed(&["mountPath"])),
        (T::Container, "volumeDevices") => (T::Unknown, keyed(&["devicePath"])),
        (T::ServiceSpec, "ports") => (T::Unknown, keyed(&["port", "protocol"])),
        _ => (T::Unknown, Replace),
    }
}

/// The schema a build's patches use. kustomize keeps one per build: the first kustomization
/// loaded with an `openapi` field (the root before its bases, a base before its later
/// siblings) picks it, and later ones are ignored.
#[derive(Clone, Debug, Default)]
pub(crate) enum SchemaChoice {
    /// No kustomization so far had `openapi`: the builtin schema, until one picks.
    #[default]
    Unset,
    /// `openapi: {version: ...}` picked the builtin schema.
    Builtin,
    Custom(Arc<CustomSchema>),
}

impl SchemaChoice {
    pub(crate) fn custom(&self) -> Option<&CustomSchema> {
        match self {
            SchemaChoice::Custom(schema) => Some(schema),
            _ => None,
        }
    }
}

/// A parsed custom schema.
#[derive(Debug, PartialEq)]
pub(crate) struct CustomSchema {
    definitions: Map<String, Value>,
    /// (group, version, kind) to the name of its definition.
    kinds: Vec<((String, String, String), String)>,
}

/// Bounds `$ref` chains, which may be cyclic.
const MAX_REF_DEPTH: usize = 32;

impl CustomSchema {
    /// Reads the schema text of file `origin`.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<CustomSchema, String> {
        let doc = match serde_json::from_str::<Value>(text) {
            Ok(doc) => doc,
            Err(_) => crate::yaml::parse_documents(text, origin)
                .map_err(|e| format!("invalid schema file: {e}"))?
                .into_iter()
                .next()
                .unwrap_or(Value::Null),
        };
        let Some(Value::Object(definitions)) = doc.get("definitions").cloned() else {
            return Err(format!("invalid schema file {origin}: no 'definitions' map"));
        };
        let mut kinds = Vec::new();
        for (name, definition) in &definitions {
            let gvks = definition
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array);
            for gvk in gvks.into_iter().flatten() {
                let text = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or("").to_string();
                kinds.push(((text("group"), text("version"), text("kind")), name.clone()));
            }
        }
        Ok(CustomSchema { definitions, kinds })
    }

    /// The schema type of an object's top level: its kind's definition, or nothing known.
    pub(crate) fn root_type(&self, group: &str, version: &str, kind: &str) -> SchemaType<'_> {
        self.kinds
            .iter()
            .find(|((g, v, k), _)| g == group && v == version && k == kind)
            .and_then(|(_, name)| self.definitions.get(name))
            .map_or(SchemaType::Unknown, |node| SchemaType::Custom(self, node))
    }

    /// The type of property `field` of `node`, and how it merges if it is a list.
    pub(crate) fn field<'s>(&'s self, node: &'s Value, field: &str) -> (SchemaType<'s>, ListMerge<'s>) {
        let Some(property) = self.resolve(node).get("properties").and_then(|p| p.get(field)) else {
            return (SchemaType::Unknown, ListMerge::Replace);
        };
        let strategy = property
            .get("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .unwrap_or("");
        let merge = if !strategy.contains("merge") {
            ListMerge::Replace
        } else if let Some(keys) = property
            .get("x-kubernetes-list-map-keys")
            .filter(|k| k.is_array())
        {
            ListMerge::ByKeys(Keys::Custom(keys))
        } else if let Some(key) = property
            .get("x-kubernetes-patch-merge-key")
            .filter(|k| k.is_string())
        {
            ListMerge::ByKeys(Keys::Custom(key))
        } else {
            ListMerge::Primitive
        };
        let property = self.resolve(property);
        // A list's elements have the type of its items; strategies sit on the list itself.
        let typed = property
            .get("items")
            .map_or(property, |items| self.resolve(items));
        (SchemaType::Custom(self, typed), merge)
    }

    /// Follows `$ref: #/definitions/<name>` links.
    fn resolve<'s>(&'s self, mut node: &'s Value) -> &'s Value {
        for _ in 0..MAX_REF_DEPTH {
            let target = node
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/definitions/"))
                .and_then(|name| self.definitions.get(name));
            match target {
                Some(next) => node = next,
                None => break,
            }
        }
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_kinds_are_known_by_group_and_custom_resources_are_not() {
        assert_eq!(
            root_type("apps/v1", "Deployment", None),
            SchemaType::Root(BuiltinKind::Workload)
        );
        assert_eq!(root_type("v1", "Pod", None), SchemaType::Root(BuiltinKind::Pod));
        assert_eq!(
            root_type("v1", "ConfigMap", None),
            SchemaType::Root(BuiltinKind::Other)
        );
        assert_eq!(
            root_type("example.com/v1", "Deployment", None),
            SchemaType::Unknown
        );
        assert_eq!(root_type("apps/v1", "Widget", None), SchemaType::Unknown);
    }

    #[test]
    fn container_lists_merge_by_their_keys_through_a_cronjob() {
        let spec = field(root_type("batch/v1", "CronJob", None), "spec").0;
        let job = field(field(spec, "jobTemplate").0, "spec").0;
        let pod = field(field(job, "template").0, "spec").0;
        let (container, merge) = field(pod, "containers");
        assert_eq!(merge, ListMerge::ByKeys(Keys::Builtin(&["name"])));
        assert_eq!(
            field(container, "ports").1,
            ListMerge::ByKeys(Keys::Builtin(&["containerPort", "protocol"]))
        );
        assert_eq!(field(container, "args").1, ListMerge::Replace);
    }

    const SCHEMA: &str = r##"
definitions:
  v1.Pipeline:
    x-kubernetes-group-version-kind: [{group: ci.example.com, version: v1, kind: Pipeline}]
    properties:
      spec: {$ref: "#/definitions/v1.Spec"}
  v1.Spec:
    properties:
      stages:
        items: {$ref: "#/definitions/v1.Stage"}
        x-kubernetes-patch-merge-key: name
        x-kubernetes-patch-strategy: merge
      triggers:
        x-kubernetes-list-map-keys: [branch, event]
        x-kubernetes-patch-merge-key: branch
        x-kubernetes-patch-strategy: merge
      notify:
        x-kubernetes-list-map-keys: [provider]
      labels:
        x-kubernetes-patch-strategy: merge
  v1.Stage:
    properties:
      env:
        x-kubernetes-patch-merge-key: name
        x-kubernetes-patch-strategy: merge,retainKeys
"##;

    fn keys(merge: ListMerge<'_>) -> Option<Vec<&str>> {
        match merge {
            ListMerge::ByKeys(keys) => Some(keys.names()),
            _ => None,
        }
    }

    #[test]
    fn merge_keys_follow_refs_and_list_map_keys_win() {
        let schema = CustomSchema::parse(SCHEMA, "schema.yaml").unwrap();
        let root = schema.root_type("ci.example.com", "v1", "Pipeline");
        let SchemaType::Custom(_, root) = root else {
            panic!("kind not found");
        };
        let (spec, _) = schema.field(root, "spec");
        let SchemaType::Custom(_, spec) = spec else {
            panic!("spec not typed");
        };
        let (stage, stages) = schema.field(spec, "stages");
        assert_eq!(keys(stages), Some(vec!["name"]));
        let SchemaType::Custom(_, stage) = stage else {
            panic!("items not typed");
        };
        assert_eq!(keys(schema.field(stage, "env").1), Some(vec!["name"]));
        assert_eq!(
            keys(schema.field(spec, "triggers").1),
            Some(vec!["branch", "event"])
        );
        // List-map keys without a patch strategy do not merge.
        assert_eq!(schema.field(spec, "notify").1, ListMerge::Replace);
        assert_eq!(schema.field(spec, "labels").1, ListMerge::Primitive);
        assert_eq!(schema.field(spec, "missing").1, ListMerge::Replace);
    }

    #[test]
    fn kinds_not_in_the_schema_are_unknown_and_a_schema_needs_definitions() {
        let schema = CustomSchema::parse(SCHEMA, "schema.yaml").unwrap();
        assert_eq!(schema.root_type("apps", "v1", "Deployment"), SchemaType::Unknown);
        assert_eq!(
            schema.root_type("ci.example.com", "v2", "Pipeline"),
            SchemaType::Unknown
        );
        let err = CustomSchema::parse("{\"swagger\": \"2.0\"}", "s.json").unwrap_err();
        assert!(err.contains("no 'definitions' map"), "{err}");
    }
}
