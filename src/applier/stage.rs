//! Apply order: which stage an object belongs to (definitions, classes, custom kinds, the
//! rest) and its place within the stage. Deletion uses the reverse order.

use kustomize::gvk::split_api_version;

/// Kinds in Flux's apply order; unlisted kinds come after them, webhooks last.
const KIND_ORDER: [&str; 23] = [
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];
const LAST_KINDS: [&str; 2] = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];

/// The apply stages, applied in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Stage {
    /// CRDs, Namespaces, ClusterRoles; waited for before the next stage.
    Definitions,
    /// Kinds whose name ends in `Class`.
    Classes,
    /// `--custom-apply-stage-kinds`.
    Custom,
    Rest,
}

impl Stage {
    /// Every stage, in apply order.
    pub(crate) const ALL: [Stage; 4] = [Stage::Definitions, Stage::Classes, Stage::Custom, Stage::Rest];

    /// Whether what the stage wrote must be Current before the next stage starts: after the
    /// definitions and after the classes, not after the custom stage.
    pub(crate) fn waited_for(self) -> bool {
        matches!(self, Stage::Definitions | Stage::Classes)
    }
}

/// Parses one `--custom-apply-stage-kinds` entry, `group/Kind` or `Kind` for the core group.
fn parse_group_kind(entry: &str) -> (&str, &str) {
    entry.rsplit_once('/').unwrap_or(("", entry))
}

/// The stage of an object of this `apiVersion` and `kind`.
pub(crate) fn stage_of(api_version: &str, kind: &str, custom_stage_kinds: &[String]) -> Stage {
    let (group, _) = split_api_version(api_version);
    let definition = (kind == "CustomResourceDefinition" && group == "apiextensions.k8s.io")
        || (kind == "Namespace" && group.is_empty())
        || (kind == "ClusterRole" && group == "rbac.authorization.k8s.io");
    if definition {
        Stage::Definitions
    } else if kind.ends_with("Class") {
        Stage::Classes
    } else if custom_stage_kinds
        .iter()
        .map(|e| parse_group_kind(e))
        .any(|(g, k)| g == group && k == kind)
    {
        Stage::Custom
    } else {
        Stage::Rest
    }
}

/// Sort key of an object within its stage: kind order, then (for unlisted kinds) group and
/// kind, then namespace, then name.
pub(crate) fn order_key(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> (usize, String, String, String, String) {
    let rank = KIND_ORDER
        .iter()
        .position(|k| *k == kind)
        .or_else(|| {
            LAST_KINDS
                .iter()
                .position(|k| *k == kind)
                .map(|i| KIND_ORDER.len() + 1 + i)
        })
        .unwrap_or(KIND_ORDER.len());
    let (group, unlisted_kind) = if rank == KIND_ORDER.len() {
        (split_api_version(api_version).0.to_string(), kind.to_string())
    } else {
        Default::default()
    };
    (
        rank,
        group,
        unlisted_kind,
        namespace.to_string(),
        name.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_one_holds_crds_namespaces_and_cluster_roles_only() {
        assert_eq!(
            stage_of("apiextensions.k8s.io/v1", "CustomResourceDefinition", &[]),
            Stage::Definitions
        );
        assert_eq!(stage_of("v1", "Namespace", &[]), Stage::Definitions);
        assert_eq!(
            stage_of("rbac.authorization.k8s.io/v1", "ClusterRole", &[]),
            Stage::Definitions
        );
        assert_eq!(
            stage_of("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &[]),
            Stage::Rest
        );
        // same kind name in another group is not special
        assert_eq!(stage_of("example.com/v1", "Namespace", &[]), Stage::Rest);
    }

    #[test]
    fn only_the_definitions_and_classes_are_waited_for() {
        // Flux waits for everything the first two stages wrote, not after the custom stage,
        // and the last stage has nothing after it
        assert!(Stage::Definitions.waited_for());
        assert!(Stage::Classes.waited_for());
        assert!(!Stage::Custom.waited_for());
        assert!(!Stage::Rest.waited_for());
    }

    #[test]
    fn class_kinds_then_custom_kinds_then_the_rest() {
        assert_eq!(stage_of("storage.k8s.io/v1", "StorageClass", &[]), Stage::Classes);
        assert_eq!(
            stage_of("gateway.networking.k8s.io/v1", "GatewayClass", &[]),
            Stage::Classes
        );
        let custom = vec![
            "rbac.authorization.k8s.io/Role".to_string(),
            "ConfigMap".to_string(),
        ];
        assert_eq!(
            stage_of("rbac.authorization.k8s.io/v1", "Role", &custom),
            Stage::Custom
        );
        assert_eq!(stage_of("v1", "ConfigMap", &custom), Stage::Custom);
        assert_eq!(stage_of("rbac.authorization.k8s.io/v1", "Role", &[]), Stage::Rest);
        assert_eq!(stage_of("apps/v1", "Deployment", &custom), Stage::Rest);
        assert!(
            Stage::Definitions < Stage::Classes
                && Stage::Classes < Stage::Custom
                && Stage::Custom < Stage::Rest
        );
    }

    #[test]
    fn kind_order_within_a_stage_follows_flux() {
        let mut objects = [
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "",
                "v",
            ),
            ("example.com/v1", "Widget", "a", "w"),
            ("apps/v1", "Deployment", "a", "d"),
            ("v1", "ConfigMap", "b", "c"),
            ("v1", "ConfigMap", "a", "z"),
            ("v1", "ServiceAccount", "a", "sa"),
            (
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
                "",
                "m",
            ),
            ("batch/v1", "Job", "a", "j"),
        ];
        objects.sort_by_key(|(av, k, ns, n)| order_key(av, k, ns, n));
        let kinds: Vec<_> = objects.iter().map(|(_, k, ns, _)| format!("{k}:{ns}")).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount:a",
                "ConfigMap:a",
                "ConfigMap:b",
                "Deployment:a",
                "Job:a", // unlisted: by group "batch" < "example.com"
                "Widget:a",
                "MutatingWebhookConfiguration:",
                "ValidatingWebhookConfiguration:",
            ]
        );
    }
}
