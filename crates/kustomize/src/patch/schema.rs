//! The list merge strategies kustomize takes from its builtin Kubernetes 1.21.2 schema.
//!
//! kustomize (kyaml `merge2`) merges a list by key only where the schema carries
//! `x-kubernetes-patch-strategy: merge` with a merge key (or `x-kubernetes-list-map-keys`,
//! which win); every other list, and every list of a kind the schema does not know (custom
//! resources), is replaced as a whole. `replace` and `retainKeys` strategies are ignored by
//! kustomize, so maps always merge. Instead of embedding the 3 MB schema we model the few
//! types on the path to those fields: object metadata (finalizers, ownerReferences), status
//! conditions, the pod spec and its containers in every workload, Service ports, and the
//! lists of ServiceAccounts and webhook configurations ([`field`] lists them all).
//! A kustomization's own `openapi` schema replaces all of this (see `openapi`).

use serde_json::Value;

use super::openapi::CustomSchema;
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
}
