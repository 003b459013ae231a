//! JSON6902 operations applied to one object as kustomize applies them (evanphx/json-patch
//! v4), within a bound on how much they add: a `copy` duplicates a subtree, so a few dozen
//! operations on a small object would double it each time (a 1.9 KB kustomization reached
//! 3.9 GB). The values `add` and `replace` bring are the patch's own text, already bounded.

use json_patch::PatchOperation;
use serde_json::Value;

use super::PatchError;
use crate::DEFAULT_MAX_FILE_BYTES;

/// How much memory a JSON6902 patch may add to an object: as much as a file the engine reads
/// may hold. Growth, not size: an object may already be large (a CRD's schema) and be patched.
pub(super) const MAX_GROWTH: usize = DEFAULT_MAX_FILE_BYTES as usize;

/// The memory a value takes in its list or map.
const SLOT: usize = size_of::<Value>();
/// serde_json's maps are B-trees: a node holds up to eleven keys and values, allocated whole.
const MAP_NODE_ENTRIES: usize = 11;
const MAP_NODE: usize = MAP_NODE_ENTRIES * (size_of::<String>() + SLOT) + 2 * size_of::<usize>();

/// Applies `ops` to a copy of `target`. Each operation's growth is measured before it runs,
/// so an operation that would take the patch past `limit` is refused before it copies.
pub(super) fn apply(target: &Value, ops: &[Value], limit: usize) -> Result<Value, PatchError> {
    let mut document = target.clone();
    let mut grown = 0;
    for (index, raw) in ops.iter().enumerate() {
        let field = |key: &str| raw.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let (op, path) = (field("op"), field("path"));
        let failure = |reason: String| PatchError::Json6902 {
            index,
            op: op.clone(),
            path: path.clone(),
            reason,
        };
        let mut raw = raw.clone();
        // evanphx/json-patch v4 (kustomize's) treats `replace` of a missing map key as `add`.
        if op == "replace" && is_missing_map_key(&document, &path) {
            raw["op"] = Value::String("add".into());
        }
        let operation: PatchOperation =
            serde_json::from_value(raw).map_err(|err| failure(err.to_string()))?;
        grown = grown_after(&document, &operation, grown, limit).ok_or_else(|| {
            failure(format!(
                "the patch would grow the object by more than {limit} bytes of memory"
            ))
        })?;
        json_patch::patch(&mut document, &[operation]).map_err(|err| failure(err.kind.to_string()))?;
    }
    Ok(document)
}

fn is_missing_map_key(document: &Value, path: &str) -> bool {
    let Some((parent, key)) = path.rsplit_once('/') else {
        return false;
    };
    let key = key.replace("~1", "/").replace("~0", "~");
    document
        .pointer(parent)
        .and_then(Value::as_object)
        .is_some_and(|map| !map.contains_key(&key))
}

/// The patch's growth (`grown` so far) after `operation`, `None` past `limit`. An upper
/// bound, never below zero: what a `move` overwrites is not taken off.
fn grown_after(document: &Value, operation: &PatchOperation, grown: usize, limit: usize) -> Option<usize> {
    let at = |path: &str| document.pointer(path).map_or(0, footprint);
    let (removed, added) = match operation {
        PatchOperation::Add(op) => (overwritten(document, op.path.as_str()), Some(&op.value)),
        PatchOperation::Replace(op) => (at(op.path.as_str()), Some(&op.value)),
        PatchOperation::Copy(op) => (
            overwritten(document, op.path.as_str()),
            document.pointer(op.from.as_str()),
        ),
        PatchOperation::Remove(op) => (at(op.path.as_str()), None),
        PatchOperation::Move(_) | PatchOperation::Test(_) => (0, None),
    };
    let kept = grown.saturating_sub(removed);
    match added {
        Some(value) => footprint_within(value, limit - kept).map(|added| kept + added),
        None => Some(kept),
    }
}

/// What an `add` (or `copy`) at `path` replaces: the whole document at the root, a map's
/// member of that key; nothing in a list, where it inserts.
fn overwritten(document: &Value, path: &str) -> usize {
    if path.is_empty() {
        return footprint(document);
    }
    let Some((parent, _)) = path.rsplit_once('/') else {
        return 0;
    };
    match document.pointer(parent) {
        Some(Value::Object(_)) => document.pointer(path).map_or(0, footprint),
        _ => 0,
    }
}

fn footprint(value: &Value) -> usize {
    footprint_within(value, usize::MAX).unwrap_or(usize::MAX)
}

/// An estimate, from above, of the memory `value` holds: each value's slot, a string's bytes,
/// a map's nodes and keys. `None` as soon as it passes `budget`, so that measuring a subtree
/// too large to copy costs no more than the budget.
fn footprint_within(value: &Value, budget: usize) -> Option<usize> {
    let mut total: usize = 0;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        let own = match value {
            Value::String(text) => text.len(),
            Value::Array(items) => {
                pending.extend(items);
                0
            }
            Value::Object(map) => {
                pending.extend(map.values());
                map.len().div_ceil(MAP_NODE_ENTRIES) * MAP_NODE + map.keys().map(String::len).sum::<usize>()
            }
            _ => 0,
        };
        total = total.saturating_add(SLOT + own);
        if total > budget {
            return None;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{PatchDoc, PatchKind, PatchOptions};
    use super::*;

    fn copies(count: usize) -> Vec<Value> {
        (0..count)
            .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/k{i}")}))
            .collect()
    }

    /// Before: each `copy` of `/data` into itself doubled the object, and the build ran out of
    /// memory (a 1.9 KB kustomization reached 3.9 GB). Twenty here would make a million maps.
    #[test]
    fn copies_that_double_the_object_are_refused_long_before_memory_runs_out() {
        let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bomb"},
            "data": {"k": "x"}});
        let ops = copies(20);
        let patch = PatchDoc {
            kind: PatchKind::Json6902(ops.clone()),
            options: PatchOptions::default(),
        };
        let err = super::super::apply(&target, &patch, None)
            .map(|_| ())
            .unwrap_err();
        let PatchError::Json6902 { index, op, path, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!((op.as_str(), path.clone()), ("copy", format!("/data/k{index}")));
        assert!(err.to_string().contains("by more than 16777216 bytes"), "{err}");
        // The operations before it apply: the limit is no lower than it says.
        let before = apply(&target, &ops[..*index], MAX_GROWTH).unwrap();
        let json_len = serde_json::to_vec(&before).unwrap().len();
        assert!(
            json_len > MAX_GROWTH / 100,
            "refused early, at {json_len} bytes of JSON"
        );
    }

    #[test]
    fn what_an_operation_removes_or_overwrites_is_taken_off() {
        // A copy of /data takes from 4 to 5 KB whatever the estimate's details.
        let target = json!({"data": {"k": "x".repeat(4000)}});
        let limit = 12_000;
        let cycle = [
            json!({"op": "copy", "from": "/data", "path": "/backup"}),
            json!({"op": "copy", "from": "/data", "path": "/backup"}),
            json!({"op": "replace", "path": "/backup", "value": "small"}),
            json!({"op": "add", "path": "/backup", "value": {"k": "x".repeat(4000)}}),
            json!({"op": "move", "from": "/backup", "path": "/moved"}),
            json!({"op": "remove", "path": "/moved"}),
        ];
        let ops: Vec<Value> = cycle.iter().cycle().take(cycle.len() * 50).cloned().collect();
        assert_eq!(apply(&target, &ops, limit).unwrap(), target);

        let grow = [json!({"op": "add", "path": "/data/big", "value": "y".repeat(13_000)})];
        let err = apply(&target, &grow, limit).map(|_| ()).unwrap_err();
        assert!(
            matches!(&err, PatchError::Json6902 { index: 0, op, .. } if op == "add"),
            "{err}"
        );
        // A copy into a list inserts, overwriting nothing: the third passes the limit.
        let copy_into_list = [
            json!({"op": "add", "path": "/list", "value": []}),
            json!({"op": "copy", "from": "/data", "path": "/list/0"}),
            json!({"op": "copy", "from": "/data", "path": "/list/0"}),
            json!({"op": "copy", "from": "/data", "path": "/list/0"}),
        ];
        let err = apply(&target, &copy_into_list, limit).map(|_| ()).unwrap_err();
        assert!(matches!(&err, PatchError::Json6902 { index: 3, .. }), "{err}");
    }
}
