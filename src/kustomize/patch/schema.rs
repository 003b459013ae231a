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

use crate::kustomize::resmap::split_api_version;

/// How a list field is merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListMerge {
    /// The patch list replaces the original (no strategy, or an unknown kind).
    Replace,
    /// Elements (maps) are matched on these keys and merged.
    ByKeys(&'static [&'static str]),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    Primitive,
}

/// The schema type of a node, as far as merge strategies need to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchemaType {
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

/// The schema type of an object's top level, from its `apiVersion` and `kind`.
pub(crate) fn root_type(api_version: &str, kind: &str) -> SchemaType {
    let (group, _) = split_api_version(api_version);
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
pub(crate) fn field(parent: SchemaType, field: &str) -> (SchemaType, ListMerge) {
    use ListMerge::{ByKeys, Primitive, Replace};
    use SchemaType as T;
    match (parent, field) {
        (T::Root(_), "metadata") => (T::ObjectMeta, Replace),
        (T::Root(_), "status") => (T::Status, Replace),
        (T::Root(BuiltinKind::Pod), "spec") => (T::PodSpec, Replace),
        (T::Root(BuiltinKind::PodTemplate), "template") => (T::PodTemplateSpec, Replace),
        (T::Root(BuiltinKind::Workload), "spec") => (T::WorkloadSpec, Replace),
        (T::Root(BuiltinKind::CronJob), "spec") => (T::CronJobSpec, Replace),
        (T::Root(BuiltinKind::Service), "spec") => (T::ServiceSpec, Replace),
        (T::Root(BuiltinKind::ServiceAccount), "secrets" | "imagePullSecrets") => {
            (T::Unknown, ByKeys(&["name"]))
        }
        (T::Root(BuiltinKind::WebhookConfiguration), "webhooks") => (T::Unknown, ByKeys(&["name"])),
        (T::ObjectMeta, "finalizers") => (T::Unknown, Primitive),
        (T::ObjectMeta, "ownerReferences") => (T::Unknown, ByKeys(&["uid"])),
        (T::Status, "conditions") => (T::Unknown, ByKeys(&["type"])),
        (T::WorkloadSpec, "template") => (T::PodTemplateSpec, Replace),
        (T::CronJobSpec, "jobTemplate") => (T::JobTemplateSpec, Replace),
        (T::JobTemplateSpec, "metadata") => (T::ObjectMeta, Replace),
        (T::JobTemplateSpec, "spec") => (T::WorkloadSpec, Replace),
        (T::PodTemplateSpec, "metadata") => (T::ObjectMeta, Replace),
        (T::PodTemplateSpec, "spec") => (T::PodSpec, Replace),
        (T::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            (T::Container, ByKeys(&["name"]))
        }
        (T::PodSpec, "volumes" | "imagePullSecrets") => (T::Unknown, ByKeys(&["name"])),
        (T::PodSpec, "hostAliases") => (T::Unknown, ByKeys(&["ip"])),
        (T::PodSpec, "topologySpreadConstraints") => {
            (T::Unknown, ByKeys(&["topologyKey", "whenUnsatisfiable"]))
        }
        (T::Container, "env") => (T::Unknown, ByKeys(&["name"])),
        (T::Container, "ports") => (T::Unknown, ByKeys(&["containerPort", "protocol"])),
        (T::Container, "volumeMounts") => (T::Unknown, ByKeys(&["mountPath"])),
        (T::Container, "volumeDevices") => (T::Unknown, ByKeys(&["devicePath"])),
        (T::ServiceSpec, "ports") => (T::Unknown, ByKeys(&["port", "protocol"])),
        _ => (T::Unknown, Replace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_kinds_are_known_by_group_and_custom_resources_are_not() {
        assert_eq!(
            root_type("apps/v1", "Deployment"),
            SchemaType::Root(BuiltinKind::Workload)
        );
        assert_eq!(root_type("v1", "Pod"), SchemaType::Root(BuiltinKind::Pod));
        assert_eq!(root_type("v1", "ConfigMap"), SchemaType::Root(BuiltinKind::Other));
        assert_eq!(root_type("example.com/v1", "Deployment"), SchemaType::Unknown);
        assert_eq!(root_type("apps/v1", "Widget"), SchemaType::Unknown);
    }

    #[test]
    fn container_lists_merge_by_their_keys_through_a_cronjob() {
        let spec = field(root_type("batch/v1", "CronJob"), "spec").0;
        let job = field(field(spec, "jobTemplate").0, "spec").0;
        let pod = field(field(job, "template").0, "spec").0;
        let (container, merge) = field(pod, "containers");
        assert_eq!(merge, ListMerge::ByKeys(&["name"]));
        assert_eq!(
            field(container, "ports").1,
            ListMerge::ByKeys(&["containerPort", "protocol"])
        );
        assert_eq!(field(container, "args").1, ListMerge::Replace);
    }
}
