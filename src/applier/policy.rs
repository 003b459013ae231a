//! Per-object policies read from labels or annotations: a key matches when the
//! label or annotation is present and equals the value case-insensitively.

use serde_json::Value;

use crate::api::conditions::keys;

/// `kustomize.toolkit.fluxcd.io/ssa`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SsaPolicy {
    Override,
    Merge,
    IfNotPresent,
    Ignore,
}

/// True when `key` is set to `value` (case-insensitive) as a label or an annotation.
pub(crate) fn has(obj: &Value, key: &str, value: &str) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        obj.pointer(&format!("/metadata/{field}"))
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty() && v.eq_ignore_ascii_case(value))
    })
}

pub(crate) fn ssa_policy(obj: &Value) -> SsaPolicy {
    if has(obj, keys::SSA_ANNOTATION, "Ignore") {
        SsaPolicy::Ignore
    } else if has(obj, keys::SSA_ANNOTATION, "IfNotPresent") {
        SsaPolicy::IfNotPresent
    } else if has(obj, keys::SSA_ANNOTATION, "Merge") {
        SsaPolicy::Merge
    } else {
        SsaPolicy::Override
    }
}

/// Neither applied nor pruned: `reconcile: disabled` or `ssa: Ignore`.
pub(crate) fn excluded(obj: &Value) -> bool {
    has(obj, keys::RECONCILE_ANNOTATION, "disabled") || ssa_policy(obj) == SsaPolicy::Ignore
}

pub(crate) fn force_enabled(obj: &Value) -> bool {
    has(obj, keys::FORCE_ANNOTATION, "enabled")
}

pub(crate) fn prune_disabled(obj: &Value) -> bool {
    has(obj, keys::PRUNE_ANNOTATION, "disabled")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_labels_or_annotations_case_insensitively() {
        let obj = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/ssa": "ifnotpresent"}}});
        assert_eq!(ssa_policy(&obj), SsaPolicy::IfNotPresent);
        let obj = json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/reconcile": "Disabled"}}});
        assert!(excluded(&obj));
        let obj = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/force": "Enabled"}}});
        assert!(force_enabled(&obj));
        assert!(!prune_disabled(&obj));
        assert_eq!(ssa_policy(&json!({})), SsaPolicy::Override);
    }
}
