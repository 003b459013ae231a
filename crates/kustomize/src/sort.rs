//! kustomize's legacy output order (`sortOptions: {order: legacy}`); without sortOptions
//! Flux keeps the FIFO accumulation order and nothing here runs.

use super::file::LegacySortOptions;
use super::resmap::{ResId, ResMap};

const ORDER_FIRST: &[&str] = &[
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

const ORDER_LAST: &[&str] = &["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];

/// Sorts by kind rank (orderFirst kinds first, orderLast kinds last), then by
/// `group_version_kind`, then by `gvk|namespace|name`.
pub(crate) fn legacy(map: &mut ResMap, options: Option<&LegacySortOptions>) {
    let (first, last): (Vec<&str>, Vec<&str>) = match options {
        Some(o) => (
            o.order_first.iter().map(String::as_str).collect(),
            o.order_last.iter().map(String::as_str).collect(),
        ),
        None => (ORDER_FIRST.to_vec(), ORDER_LAST.to_vec()),
    };
    let rank = |kind: &str| -> i64 {
        if let Some(i) = first.iter().position(|k| *k == kind) {
            return i as i64 - first.len() as i64;
        }
        if let Some(i) = last.iter().position(|k| *k == kind) {
            return i as i64 + 1;
        }
        0
    };
    map.resources.sort_by_cached_key(|r| {
        let id = r.id();
        (rank(&id.kind), gvk_string(&id), sort_string(&id))
    });
}

fn or<'a>(s: &'a str, empty: &'a str) -> &'a str {
    if s.is_empty() { empty } else { s }
}

fn gvk_string(id: &ResId) -> String {
    format!(
        "{}_{}_{}",
        or(&id.group, "~G"),
        or(&id.version, "~V"),
        or(&id.kind, "~K")
    )
}

fn sort_string(id: &ResId) -> String {
    format!(
        "{}|{}|{}",
        gvk_string(id),
        or(&id.namespace, "~X"),
        or(&id.name, "~N")
    )
}
