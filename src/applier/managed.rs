//! Taking over field managers the way Flux does: fields set by `kubectl`,
//! `before-first-apply` and update operations of `kustomize-controller` (plus `--override-manager`
//! names, all prefix-matched) are folded into the `kustomize-controller` Apply entry, and the
//! annotations/labels of older tools are removed, in one JSON patch. Skipped for `ssa: Merge`.

use serde_json::{Map, Value, json};

use super::diff::{array_index, pointer_tokens};
use super::policy::{SsaPolicy, ssa_policy};
use crate::api::conditions::keys::APPLY_FIELD_MANAGER;

const CLEANUP_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "kustomize.toolkit.fluxcd.io/checksum",
    "fluxcd.io/sync-checksum",
];
const CLEANUP_LABELS: [&str; 1] = ["fluxcd.io/sync-gc-mark"];

fn taken_over(entry: &Value, override_managers: &[String]) -> bool {
    if entry
        .get("subresource")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        return false;
    }
    let manager = entry.get("manager").and_then(Value::as_str).unwrap_or_default();
    let operation = entry.get("operation").and_then(Value::as_str).unwrap_or_default();
    let update = operation == "Update";
    (manager.starts_with("kubectl") && (update || operation == "Apply"))
        || (manager.starts_with("before-first-apply") && update)
        || (manager.starts_with(APPLY_FIELD_MANAGER) && update)
        || override_managers.iter().any(|m| manager.starts_with(m.as_str()))
}

fn merge_fields(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge_fields(a.entry(k.clone()).or_insert_with(|| Value::Object(Map::new())), v);
            }
        }
        (slot, from) if slot.as_object().is_some_and(Map::is_empty) => *slot = from.clone(),
        _ => {}
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that cleans up `live` before the dry-run, or `None` when nothing needs it.
pub(crate) fn cleanup_patch(live: &Value, desired: &Value, override_managers: &[String]) -> Option<Value> {
    if ssa_policy(desired) == SsaPolicy::Merge || ssa_policy(live) == SsaPolicy::Merge {
        return None;
    }
    let mut ops = Vec::new();
    for (field, keys) in [
        ("annotations", &CLEANUP_ANNOTATIONS[..]),
        ("labels", &CLEANUP_LABELS[..]),
    ] {
        for key in keys {
            if live
                .pointer(&format!("/metadata/{field}"))
                .and_then(|m| m.get(*key))
                .is_some()
            {
                ops.push(json!({"op": "remove", "path": format!("/metadata/{field}/{}", escape(key))}));
            }
        }
    }
    let entries = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if entries.iter().any(|e| taken_over(e, override_managers)) {
        let api_version = desired.get("apiVersion").cloned().unwrap_or(Value::Null);
        let mut kept = Vec::new();
        let mut fields = Value::Object(Map::new());
        let mut ours: Option<usize> = None;
        for entry in entries {
            if taken_over(&entry, override_managers) {
                merge_fields(&mut fields, entry.get("fieldsV1").unwrap_or(&Value::Null));
                continue;
            }
            let is_ours = entry.get("manager").and_then(Value::as_str) == Some(APPLY_FIELD_MANAGER)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply")
                && entry.get("subresource").is_none();
            if is_ours {
                ours = Some(kept.len());
            }
            kept.push(entry);
        }
        match ours {
            Some(i) => {
                let own = kept[i]
                    .get("fieldsV1")
                    .cloned()
                    .unwrap_or(Value::Object(Map::new()));
                merge_fields(&mut fields, &own);
                kept[i]["fieldsV1"] = fields;
            }
            None => kept.push(
                json!({"manager": APPLY_FIELD_MANAGER, "operation": "Apply", "apiVersion": api_version,
                "fieldsType": "FieldsV1", "fieldsV1": fields}),
            ),
        }
        ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": kept}));
    }
    (!ops.is_empty()).then_some(Value::Array(ops))
}

/// The JSON patch that sets the `apiVersion` of every managedFields entry of `live` to
/// `api_version` (Flux's `MigrateAPIVersion`), or `None` when they all have it. Each replace
/// is guarded by a test of the old value, so a concurrent change of managedFields fails the
/// patch instead of being overwritten.
pub(crate) fn migrate_api_version_patch(live: &Value, api_version: &str) -> Option<Value> {
    let entries = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)?;
    let ops: Vec<Value> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("apiVersion").and_then(Value::as_str) != Some(api_version))
        .flat_map(|(i, e)| {
            let path = format!("/metadata/managedFields/{i}/apiVersion");
            [
                json!({"op": "test", "path": path, "value": e.get("apiVersion").cloned().unwrap_or(Value::Null)}),
                json!({"op": "replace", "path": path, "value": api_version}),
            ]
        })
        .collect();
    (!ops.is_empty()).then_some(Value::Array(ops))
}

/// True when a manager other than ours owns the field at `pointer` with an Apply operation:
/// then an ignored field is left to it (stripped from our payload) instead of adopted. A list
/// index in the pointer names the element of the live list; the managedFields tree names it by
/// its key fields (`k:{"name":"app"}`), its value (`v:...`) or its index (`i:0`). A field inside
/// an atomic (wholly owned) map or list is owned with it.
pub(crate) fn owned_by_other_applier(live: &Value, pointer: &str) -> bool {
    let tokens = pointer_tokens(pointer);
    let entries = live.pointer("/metadata/managedFields").and_then(Value::as_array);
    entries.into_iter().flatten().any(|e| {
        e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("manager").and_then(Value::as_str) != Some(APPLY_FIELD_MANAGER)
            && e.get("subresource").is_none()
            && e.get("fieldsV1").is_some_and(|f| owns(f, live, &tokens))
    })
}

/// Whether the managedFields node `fields` (of the object part `live`) covers `tokens`.
fn owns(fields: &Value, live: &Value, tokens: &[String]) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        return true;
    };
    let Some(children) = fields.as_object() else {
        return false;
    };
    let (child, live_child) = match live {
        Value::Array(items) => {
            let Some((index, item)) = array_index(token).and_then(|i| items.get(i).map(|item| (i, item)))
            else {
                return false;
            };
            (
                children
                    .iter()
                    .find(|(k, _)| names_item(k, index, item))
                    .map(|(_, v)| v),
                item,
            )
        }
        _ => (
            children.get(&format!("f:{token}")),
            live.get(token).unwrap_or(&Value::Null),
        ),
    };
    match child {
        None => false,
        // a leaf in the tree with more pointer to go: the field is owned whole (atomic)
        Some(Value::Object(m)) if m.is_empty() => true,
        Some(child) => owns(child, live_child, rest),
    }
}

/// Whether a managedFields key names the list element `item` at `index`.
fn names_item(key: &str, index: usize, item: &Value) -> bool {
    if let Some(keys) = key.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
            return false;
        };
        return keys.iter().all(|(k, v)| item.get(k) == Some(v));
    }
    if let Some(value) = key.strip_prefix("v:") {
        return serde_json::from_str::<Value>(value).is_ok_and(|v| &v == item);
    }
    key.strip_prefix("i:").and_then(|i| i.parse::<usize>().ok()) == Some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(managers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "managedFields": managers,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "x"}}})
    }

    #[test]
    fn folds_kubectl_and_before_first_apply_into_our_apply_entry() {
        let managers = json!([
            {"manager": "kustomize-controller", "operation": "Apply", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:b": {}}}},
            {"manager": "before-first-apply", "operation": "Update", "fieldsV1": {"f:data": {"f:c": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:data": {"f:d": {}}}},
            {"manager": "kubectl", "operation": "Update", "subresource": "status", "fieldsV1": {}}
        ]);
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let patch = cleanup_patch(&live(managers), &desired, &[]).unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "remove", "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"})
        );
        let kept = &patch[1]["value"];
        assert_eq!(kept.as_array().unwrap().len(), 3);
        assert_eq!(
            kept[0]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}, "f:c": {}}})
        );
        assert_eq!(kept[1]["manager"], "kube-controller-manager");
        assert_eq!(kept[2]["subresource"], "status");
    }

    #[test]
    fn creates_our_entry_when_missing_and_honours_override_managers() {
        let managers = json!([{"manager": "helm", "operation": "Update", "fieldsV1": {"f:data": {}}}]);
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let mut obj = live(managers);
        obj["metadata"].as_object_mut().unwrap().remove("annotations");
        assert_eq!(cleanup_patch(&obj, &desired, &[]), None);
        let patch = cleanup_patch(&obj, &desired, &["helm".into()]).unwrap();
        assert_eq!(patch[0]["value"][0]["manager"], "kustomize-controller");
        assert_eq!(patch[0]["value"][0]["operation"], "Apply");
        assert_eq!(patch[0]["value"][0]["fieldsV1"], json!({"f:data": {}}));
    }

    #[test]
    fn merge_policy_skips_the_cleanup() {
        let managers = json!([{"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {}}]);
        let desired = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/ssa": "Merge"}}});
        assert_eq!(cleanup_patch(&live(managers), &desired, &[]), None);
    }

    #[test]
    fn finds_fields_owned_by_other_appliers() {
        let obj = live(json!([
            {"manager": "hpa-applier", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kustomize-controller", "operation": "Apply", "fieldsV1": {"f:spec": {"f:paused": {}}}}
        ]));
        assert!(owned_by_other_applier(&obj, "/spec/replicas"));
        assert!(!owned_by_other_applier(&obj, "/spec/paused"));
        assert!(!owned_by_other_applier(&obj, "/spec/other"));
    }

    // fieldsV1 keys of list elements as the API server writes them (structured-merge-diff
    // path elements): `k:` associative keys, `v:` set values, `i:` indices of atomic lists
    #[test]
    fn list_indices_resolve_to_the_keys_of_the_managed_fields_tree() {
        let containers = |f: Value| json!({"f:spec": {"f:template": {"f:spec": {"f:containers": f}}}});
        let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web",
            "finalizers": ["a.example.com/x", "b.example.com/y"], "managedFields": [
                {"manager": "image-updater", "operation": "Apply",
                 "fieldsV1": containers(json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:name": {}, "f:image": {}}}))},
                {"manager": "finalizer-bot", "operation": "Apply",
                 "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"b.example.com/y\"": {}}}}},
                {"manager": "kustomize-controller", "operation": "Apply",
                 "fieldsV1": containers(json!({"k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}}}))}
            ]},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:1"}, {"name": "proxy", "image": "proxy:1", "args": ["-v"]}]}}}});
        let c = "/spec/template/spec/containers";
        assert!(owned_by_other_applier(&obj, &format!("{c}/1/image")));
        assert!(!owned_by_other_applier(&obj, &format!("{c}/1/args")));
        assert!(!owned_by_other_applier(&obj, &format!("{c}/0/image")));
        // pointers to nothing: past the end, "-", a leading zero
        for missing in ["/2/image", "/-/image", "/01/image"] {
            assert!(
                !owned_by_other_applier(&obj, &format!("{c}{missing}")),
                "{missing}"
            );
        }
        assert!(owned_by_other_applier(&obj, "/metadata/finalizers/1"));
        assert!(!owned_by_other_applier(&obj, "/metadata/finalizers/0"));

        // an atomic list is owned whole, and with it every element
        obj["metadata"]["managedFields"][0]["fieldsV1"] = containers(json!({}));
        assert!(owned_by_other_applier(&obj, &format!("{c}/0/image")));
        obj["metadata"]["managedFields"][0]["fieldsV1"] = containers(json!({"i:0": {"f:image": {}}}));
        assert!(owned_by_other_applier(&obj, &format!("{c}/0/image")));
        assert!(!owned_by_other_applier(&obj, &format!("{c}/1/image")));
    }

    #[test]
    fn migration_rewrites_only_entries_of_other_versions() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "example.com/v1beta1"},
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "example.com/v1"},
            {"manager": "other", "operation": "Update", "apiVersion": "example.com/v1beta1", "subresource": "status"}
        ]}});
        let patch = migrate_api_version_patch(&obj, "example.com/v1").unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/managedFields/0/apiVersion", "value": "example.com/v1beta1"},
                {"op": "replace", "path": "/metadata/managedFields/0/apiVersion", "value": "example.com/v1"},
                {"op": "test", "path": "/metadata/managedFields/2/apiVersion", "value": "example.com/v1beta1"},
                {"op": "replace", "path": "/metadata/managedFields/2/apiVersion", "value": "example.com/v1"}
            ])
        );
        // applying it as a JSON patch leaves every entry at the desired version
        let mut migrated = obj.clone();
        json_patch::patch(
            &mut migrated,
            &serde_json::from_value::<json_patch::Patch>(patch).unwrap(),
        )
        .unwrap();
        for e in migrated["metadata"]["managedFields"].as_array().unwrap() {
            assert_eq!(e["apiVersion"], "example.com/v1");
        }
        assert_eq!(migrate_api_version_patch(&migrated, "example.com/v1"), None);
        assert_eq!(migrate_api_version_patch(&json!({"metadata": {}}), "v1"), None);
    }
}
