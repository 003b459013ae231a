//! What Flux normalizes before applying, plus the owner labels.
//!
//! Flux round-trips built-in kinds through their Go types; the fields that adds are written by
//! [`super::typed_shape`]. Not done: the round trip also drops unknown fields; here the
//! server-side dry-run rejects or drops them instead.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::Owner;
use super::masking::is_secret;
use super::typed_shape::add_typed_zero_fields;
use crate::api::conditions::keys;

/// A manifest that cannot be applied as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NormalizeError {
    #[error("{subject} namespace not specified: {kind} is namespaced and metadata.namespace is empty")]
    NamespaceMissing { subject: String, kind: String },
    #[error("{subject} normalization error: {reason}")]
    Malformed { subject: String, reason: String },
}

/// Kinds with a Pod template at this path, whose container ports get a default protocol.
const POD_SPEC_PATHS: [(&str, &str); 7] = [
    ("Pod", "/spec"),
    ("Deployment", "/spec/template/spec"),
    ("StatefulSet", "/spec/template/spec"),
    ("DaemonSet", "/spec/template/spec"),
    ("ReplicaSet", "/spec/template/spec"),
    ("Job", "/spec/template/spec"),
    ("CronJob", "/spec/jobTemplate/spec/template/spec"),
];

/// Normalizes `obj` in place for applying as part of `owner`'s objects. `namespaced` is the
/// scope of the kind; cluster-scoped objects lose a stray `metadata.namespace` so their
/// identity is stable.
pub(crate) fn normalize(
    obj: &mut Value,
    owner: &Owner,
    namespaced: bool,
    subject: &str,
) -> Result<(), NormalizeError> {
    let malformed = |reason: &str| NormalizeError::Malformed {
        subject: subject.into(),
        reason: reason.into(),
    };
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let metadata = obj
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| malformed("metadata is missing"))?;
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if namespaced && namespace.is_empty() {
        return Err(NormalizeError::NamespaceMissing {
            subject: subject.into(),
            kind,
        });
    }
    if !namespaced {
        metadata.remove("namespace");
    }
    metadata.insert("creationTimestamp".into(), Value::Null);
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    let labels = labels
        .as_object_mut()
        .ok_or_else(|| malformed("metadata.labels is not a map"))?;
    labels.insert(keys::NAME_LABEL.into(), owner.name.clone().into());
    labels.insert(keys::NAMESPACE_LABEL.into(), owner.namespace.clone().into());

    let is_crd = kind == "CustomResourceDefinition";
    if !is_crd && let Some(map) = obj.as_object_mut() {
        map.remove("status");
    }
    let group_is_core_or_builtin = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(is_builtin_api_version);
    if group_is_core_or_builtin {
        default_protocols(obj, &kind);
    }
    add_typed_zero_fields(obj);
    if is_secret(obj) {
        fold_string_data(obj).map_err(|r| malformed(&r))?;
    }
    Ok(())
}

fn is_builtin_api_version(api_version: &str) -> bool {
    matches!(api_version, "v1" | "apps/v1" | "batch/v1")
}

fn default_protocols(obj: &mut Value, kind: &str) {
    let set_default = |ports: Option<&mut Value>| {
        for port in ports.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(port) = port.as_object_mut() {
                port.entry("protocol").or_insert_with(|| "TCP".into());
            }
        }
    };
    if kind == "Service" {
        set_default(obj.pointer_mut("/spec/ports"));
    }
    if let Some((_, path)) = POD_SPEC_PATHS.iter().find(|(k, _)| *k == kind) {
        let containers = obj
            .pointer_mut(&format!("{path}/containers"))
            .and_then(Value::as_array_mut);
        for container in containers.into_iter().flatten() {
            set_default(container.get_mut("ports"));
        }
    }
}

/// Moves `stringData` into `data` (base64), as the API server would.
fn fold_string_data(obj: &mut Value) -> Result<(), String> {
    let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return Ok(());
    };
    let data = obj
        .as_object_mut()
        .expect("object")
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    let data = data.as_object_mut().ok_or("data is not a map")?;
    for (key, value) in string_data {
        let text = value
            .as_str()
            .ok_or_else(|| format!("stringData.{key} is not a string"))?;
        data.insert(key, STANDARD.encode(text.as_bytes()).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner() -> Owner {
        Owner::new("apps", "flux-system")
    }

    #[test]
    fn sets_owner_labels_over_existing_ones_and_nulls_creation_timestamp() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a",
            "labels": {"kustomize.toolkit.fluxcd.io/name": "other", "app": "x"}}, "data": {}});
        normalize(&mut obj, &owner(), true, "ConfigMap/a/c").unwrap();
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"app": "x", "kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"})
        );
        assert_eq!(obj["metadata"]["creationTimestamp"], Value::Null);
        assert!(
            obj["metadata"]
                .as_object()
                .unwrap()
                .contains_key("creationTimestamp")
        );
    }

    #[test]
    fn a_namespaced_object_without_namespace_is_an_error_naming_it() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let err = normalize(&mut obj, &owner(), true, "ConfigMap/c").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ConfigMap/c namespace not specified: ConfigMap is namespaced and metadata.namespace is empty"
        );
    }

    #[test]
    fn cluster_scoped_objects_lose_a_stray_namespace() {
        let mut obj =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "x"}});
        normalize(&mut obj, &owner(), false, "Namespace/n").unwrap();
        assert!(obj["metadata"].get("namespace").is_none());
    }

    #[test]
    fn drops_status_except_on_crds() {
        let mut cm = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "a"}, "status": {}});
        normalize(&mut cm, &owner(), true, "Service/a/s").unwrap();
        assert!(cm.get("status").is_none());
        let mut crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "x"}, "status": {"storedVersions": []}});
        normalize(&mut crd, &owner(), false, "CustomResourceDefinition/x").unwrap();
        assert_eq!(crd["status"], json!({"storedVersions": []}));
    }

    #[test]
    fn defaults_port_protocols_of_services_and_pod_templates() {
        let mut svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "a"},
            "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        normalize(&mut svc, &owner(), true, "Service/a/s").unwrap();
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "targetPort": 0}, {"port": 53, "protocol": "UDP", "targetPort": 0}])
        );
        let mut cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "a"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}],
            "initContainers": [{"name": "i", "ports": [{"containerPort": 2}]}]}}}}}});
        normalize(&mut cron, &owner(), true, "CronJob/a/c").unwrap();
        let spec = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        // Flux defaults `containers` only
        assert!(spec["initContainers"][0]["ports"][0].get("protocol").is_none());
    }

    #[test]
    fn folds_secret_string_data_into_data() {
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "a"},
            "data": {"a": "YQ=="}, "stringData": {"b": "foobar", "a": "foo"}});
        normalize(&mut secret, &owner(), true, "Secret/a/s").unwrap();
        // stringData wins over data for the same key, like the API server
        assert_eq!(secret["data"], json!({"a": "Zm9v", "b": "Zm9vYmFy"}));
        assert!(secret.get("stringData").is_none());
    }
}
