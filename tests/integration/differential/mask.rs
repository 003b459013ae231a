//! What a side's namespace holds, and the masking that makes two sides comparable: what
//! must differ between two namespaces (their names, uids, times, resource versions) becomes a
//! placeholder, so that whether a value is there still counts but not what it is.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use regex::Regex;
use serde_json::{Value, json};

use super::harness::{KINDS, kustomization_resource, resource_of};

/// Managers of the control plane's own controllers: what they own depends on how far a
/// rollout got when the snapshot was taken, not on the controller under test.
const CONTROL_PLANE_MANAGERS: &[&str] = &["kube-controller-manager", "fake-kubelet"];

/// The Kustomizations (metadata and status) and the objects of namespace `ns` and of its
/// target namespace `ns-t`, if that exists. Raw: [`mask`] comes after.
pub(super) async fn snapshot(client: &Client, ns: &str) -> Value {
    let mut kustomizations = BTreeMap::new();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kustomization_resource());
    for ks in api.list(&ListParams::default()).await.unwrap().items {
        let name = ks.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&ks).unwrap();
        kustomizations.insert(
            name,
            json!({"metadata": kept_metadata(&value["metadata"]), "status": value["status"]}),
        );
    }
    let mut objects = BTreeMap::new();
    for namespace in [ns.to_string(), format!("{ns}-t")] {
        for (_, _, kind, _, namespaced) in KINDS {
            if !namespaced {
                continue;
            }
            let (resource, _) = resource_of(kind);
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for object in list.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                if (*kind == "ConfigMap" && name == "kube-root-ca.crt")
                    || (*kind == "ServiceAccount" && name == "default")
                {
                    continue;
                }
                let mut value = serde_json::to_value(&object).unwrap();
                let metadata = kept_metadata(&value["metadata"]);
                let body = value.as_object_mut().unwrap();
                body.remove("status");
                body.insert("metadata".into(), metadata);
                if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
                    // Addresses the API server allocates.
                    for key in ["clusterIP", "clusterIPs"] {
                        if spec
                            .get(key)
                            .is_some_and(|v| v != "None" && v != &json!(["None"]))
                        {
                            spec.insert(key.into(), json!("<allocated>"));
                        }
                    }
                }
                objects.insert(format!("{kind}/{namespace}/{name}"), value);
            }
        }
    }
    json!({"kustomizations": kustomizations, "objects": objects})
}

/// The metadata that can differ between controllers: labels, annotations, finalizers,
/// whether deletion started, and the field managers without the control plane's.
fn kept_metadata(metadata: &Value) -> Value {
    let managers: Vec<Value> = metadata["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| !CONTROL_PLANE_MANAGERS.contains(&m["manager"].as_str().unwrap_or_default()))
        .cloned()
        .collect();
    let mut labels = metadata["labels"].clone();
    if let Some(labels) = labels.as_object_mut() {
        // Each controller's selector: different by design.
        labels.remove(super::harness::CONTROLLER_LABEL);
    }
    json!({
        "labels": labels, "annotations": metadata["annotations"],
        "finalizers": metadata["finalizers"], "deletionTimestamp": metadata["deletionTimestamp"],
        "managedFields": managers,
    })
}

static UID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap());
static TIME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})").unwrap());
/// A measured duration as Go prints one (`1.503s`, `2m0.1s`, `350.2ms`); a whole number of
/// seconds (`30s`) is a setting and stays.
static DURATION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(\d+h)?(\d+m)?\d+\.\d+(s|ms|µs)\b").unwrap());

/// `value` with side `ns`'s namespace, uids, times and measured durations as placeholders,
/// resource versions and hostnames hidden, and history digests numbered in order of
/// appearance (they hash the built objects, namespaces included).
pub(super) fn mask(value: Value, ns: &str) -> Value {
    let mut digests = Vec::new();
    mask_value(value, ns, &mut digests, None)
}

fn mask_value(value: Value, ns: &str, digests: &mut Vec<String>, key: Option<&str>) -> Value {
    match value {
        Value::String(s) => match key {
            Some("resourceVersion") => json!("<rv>"),
            Some("reportingInstance") => json!("<host>"),
            Some("digest") => {
                let n = digests.iter().position(|d| d == &s).unwrap_or_else(|| {
                    digests.push(s.clone());
                    digests.len() - 1
                });
                json!(format!("<digest {}>", n + 1))
            }
            _ => json!(mask_text(&s, ns)),
        },
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| mask_value(v, ns, digests, key))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let masked = mask_value(v, ns, digests, Some(&k));
                    (mask_text(&k, ns), masked)
                })
                .collect(),
        ),
        other => other,
    }
}

pub(super) fn mask_text(text: &str, ns: &str) -> String {
    let text = text.replace(ns, "<ns>");
    let text = UID.replace_all(&text, "<uid>");
    let text = TIME.replace_all(&text, "<time>");
    DURATION.replace_all(&text, "<duration>").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_what_differs_between_namespaces_and_keeps_settings() {
        let raw = json!({
            "a": "kcd-1-x-f_cm_ConfigMap in kcd-1-x-f-t after 1.503s, timeout 30s",
            "uid": "0b4f7c2e-1a2b-4c3d-8e9f-0123456789ab",
            "t": "2026-01-02T03:04:05Z",
            "history": [{"digest": "sha256:aa"}, {"digest": "sha256:bb"}, {"digest": "sha256:aa"}],
            "resourceVersion": "123",
        });
        let masked = mask(raw, "kcd-1-x-f");
        assert_eq!(
            masked["a"],
            "<ns>_cm_ConfigMap in <ns>-t after <duration>, timeout 30s"
        );
        assert_eq!(masked["uid"], "<uid>");
        assert_eq!(masked["t"], "<time>");
        assert_eq!(masked["resourceVersion"], "<rv>");
        let digests: Vec<&Value> = masked["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| &h["digest"])
            .collect();
        assert_eq!(
            digests,
            [&json!("<digest 1>"), &json!("<digest 2>"), &json!("<digest 1>")]
        );
    }
}
