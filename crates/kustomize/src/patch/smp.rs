//! Strategic merge as kustomize does it (kyaml `merge2`, list increase direction "prepend",
//! no inference of merge keys). Behaviour checked against kustomize v5.8.1:
//! * `null` deletes a field; `$patch: delete` deletes a map (the whole object at the top);
//!   `$patch: replace` on a map replaces it; `$patch: merge` is the default.
//! * Keyed lists: elements matched on all merge keys some element carries (a missing key
//!   counts as ""). With one key, the elements the patch names come first in patch order,
//!   then the untouched originals; with several keys (ports with `protocol`), new elements
//!   come first and originals are merged where they stand. A patch element whose key tuple
//!   differs from an original one only by a missing key is dropped (kyaml treats "" as a
//!   wildcard when collecting keys).
//! * A `{$patch: replace}` element replaces the whole list with the other elements (a list
//!   the original lacks becomes the marker alone, as in kyaml); an
//!   element with `$patch: replace` *and* keys keeps the original element; `$patch: delete`
//!   removes the matched element.
//! * Scalar lists with the merge strategy (finalizers) become a union, patch values first.
//! * `$setElementOrder/...`, `$retainKeys` and `$deleteFromPrimitiveList/...` are not
//!   directives for kustomize: they are copied literally like any other key.

use serde_json::{Map, Value};

use super::schema::{self, ListMerge, SchemaType};
use crate::yaml::{NullPath, Step};

const DIRECTIVE: &str = "$patch";

/// Merges `patch` into `dest` (absent when the field is new). `None` means the map was
/// deleted by a `$patch: delete` directive.
pub(crate) fn merge_map(
    dest: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
    ty: SchemaType<'_>,
) -> Option<Map<String, Value>> {
    let mut result = match patch.get(DIRECTIVE).and_then(Value::as_str) {
        Some("delete") => return None,
        Some("replace") => Map::new(),
        _ => dest.cloned().unwrap_or_default(),
    };
    for (key, patch_value) in patch {
        if key == DIRECTIVE {
            continue;
        }
        let (field_type, list_merge) = schema::field(ty, key);
        match patch_value {
            Value::Null => {
                result.remove(key);
            }
            Value::Object(patch_map) => {
                match merge_map(result.get(key).and_then(Value::as_object), patch_map, field_type) {
                    Some(merged) => result.insert(key.clone(), Value::Object(merged)),
                    None => result.remove(key),
                };
            }
            Value::Array(patch_list) => {
                let merged = merge_list(
                    result.get(key).and_then(Value::as_array),
                    patch_list,
                    field_type,
                    list_merge,
                );
                result.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                result.insert(key.clone(), scalar.clone());
            }
        }
    }
    Some(result)
}

fn merge_list(
    dest: Option<&Vec<Value>>,
    patch: &[Value],
    element_type: SchemaType<'_>,
    strategy: ListMerge<'_>,
) -> Vec<Value> {
    if dest.is_none() && matches!(strategy, ListMerge::ByKeys(_)) && has_replace_marker(patch) {
        // kustomize's (kyaml's) result for a new list with a replace marker: the marker
        // alone, copied literally.
        return vec![serde_json::json!({ DIRECTIVE: "replace" })];
    }
    let dest = dest.map_or(&[][..], Vec::as_slice);
    match strategy {
        ListMerge::Replace => patch.to_vec(),
        ListMerge::Primitive => {
            let mut result: Vec<Value> = Vec::new();
            for value in patch.iter().chain(dest) {
                if !result.contains(value) {
                    result.push(value.clone());
                }
            }
            result
        }
        ListMerge::ByKeys(_) if has_replace_marker(patch) => patch
            .iter()
            .filter(|element| !is_replace_marker(element))
            .filter_map(|element| clean(element, element_type))
            .collect(),
        ListMerge::ByKeys(keys) => merge_keyed(dest, patch, element_type, &keys.names()),
    }
}

fn merge_keyed(dest: &[Value], patch: &[Value], element_type: SchemaType<'_>, keys: &[&str]) -> Vec<Value> {
    // Only keys some element carries take part: a ports list without any `protocol`
    // behaves like a single-key list.
    let keys: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| dest.iter().chain(patch).any(|e| e.get(key).is_some()))
        .collect();
    let tuple = |element: &Value| -> Option<Vec<String>> {
        let map = element.as_object()?;
        Some(keys.iter().map(|key| key_value(map.get(*key))).collect())
    };
    // Key tuples in first-seen order, originals first; "" matches anything here.
    let mut tuples: Vec<Vec<String>> = Vec::new();
    for element in dest.iter().chain(patch) {
        if let Some(t) = tuple(element)
            && !tuples.iter().any(|seen| wildcard_equal(seen, &t))
        {
            tuples.push(t);
        }
    }
    // (patch index, merged element) of new elements, and the fate of original elements
    // by their index: merged, kept (no patch element) or deleted (None).
    let mut added: Vec<(usize, Value)> = Vec::new();
    let mut originals: Vec<(usize, Option<Value>, Option<usize>)> = Vec::new();
    for t in &tuples {
        let original = dest.iter().position(|e| tuple(e).as_ref() == Some(t));
        let patched = patch.iter().position(|e| tuple(e).as_ref() == Some(t));
        match (original, patched) {
            (original, Some(index)) => {
                let patch_element = patch[index].as_object().expect("tuples come from maps");
                let merged = match (original, directive(patch_element)) {
                    (Some(original), Some("replace")) => Some(dest[original].clone()),
                    (original, _) => merge_map(
                        original.and_then(|i| dest[i].as_object()),
                        patch_element,
                        element_type,
                    )
                    .map(Value::Object),
                };
                match original {
                    Some(original) => originals.push((original, merged, Some(index))),
                    None => added.extend(merged.map(|m| (index, m))),
                }
            }
            (Some(original), None) => originals.push((original, Some(dest[original].clone()), None)),
            (None, None) => {}
        }
    }
    added.sort_by_key(|(index, _)| *index);
    let non_maps = dest.iter().filter(|e| !e.is_object()).cloned();
    if keys.len() > 1 {
        // kyaml's multi-key path: new elements first, originals merged where they are.
        originals.sort_by_key(|(original, _, _)| *original);
        let kept = originals.into_iter().filter_map(|(_, value, _)| value);
        return added
            .into_iter()
            .map(|(_, v)| v)
            .chain(kept)
            .chain(non_maps)
            .collect();
    }
    // Single key: every element the patch names comes first, in patch order.
    let mut from_patch = added;
    let mut untouched = Vec::new();
    for (original, value, patched) in originals {
        match (value, patched) {
            (Some(value), Some(index)) => from_patch.push((index, value)),
            (Some(value), None) => untouched.push((original, value)),
            (None, _) => {}
        }
    }
    from_patch.sort_by_key(|(index, _)| *index);
    untouched.sort_by_key(|(original, _)| *original);
    from_patch
        .into_iter()
        .map(|(_, v)| v)
        .chain(untouched.into_iter().map(|(_, v)| v))
        .chain(non_maps)
        .collect()
}

/// A patch value with its directives and nulls resolved against nothing.
fn clean(value: &Value, ty: SchemaType<'_>) -> Option<Value> {
    match value {
        Value::Object(map) => merge_map(None, map, ty).map(Value::Object),
        other => Some(other.clone()),
    }
}

fn directive(map: &Map<String, Value>) -> Option<&str> {
    map.get(DIRECTIVE).and_then(Value::as_str)
}

fn is_replace_marker(element: &Value) -> bool {
    element
        .as_object()
        .is_some_and(|map| map.len() == 1 && directive(map) == Some("replace"))
}

fn has_replace_marker(patch: &[Value]) -> bool {
    patch.iter().any(is_replace_marker)
}

fn key_value(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn wildcard_equal(a: &[String], b: &[String]) -> bool {
    a.iter()
        .zip(b)
        .all(|(x, y)| x.is_empty() || y.is_empty() || x == y)
}

/// Removes the implicit nulls at `paths` (values written as nothing, `key:`) that kyaml's
/// merge walk reaches: it visits every map field of the object, and the elements of lists
/// merged by key, and drops a null there unless it was written out (`null`, `~`). Lists
/// replaced whole are not walked, so their elements keep such nulls.
pub(crate) fn drop_implicit_nulls(object: &mut Map<String, Value>, paths: &[NullPath], ty: SchemaType<'_>) {
    for path in paths {
        drop_at(object, path, ty);
    }
}

fn drop_at(map: &mut Map<String, Value>, path: &[Step], ty: SchemaType<'_>) {
    let Some((Step::Key(key), rest)) = path.split_first() else {
        return;
    };
    let (field_type, list_merge) = schema::field(ty, key);
    match (rest, map.get_mut(key)) {
        ([], Some(Value::Null)) => {
            map.remove(key);
        }
        ([], _) => {}
        (rest, Some(Value::Object(inner))) => drop_at(inner, rest, field_type),
        ([Step::Index(i), rest @ ..], Some(Value::Array(items)))
            if !matches!(list_merge, ListMerge::Replace) =>
        {
            if let Some(Value::Object(element)) = items.get_mut(*i) {
                drop_at(element, rest, field_type);
            }
        }
        _ => {}
    }
}

/// kyaml refuses to merge a map, a list and a scalar into one another
/// ("wrong node kind: expected MappingNode but got ScalarNode"). Checks the fields of
/// `patch` against `dest`, through nested maps; returns the path, the original kind and
/// the patch kind of the first conflict.
pub(crate) fn kind_conflict(
    dest: &Map<String, Value>,
    patch: &Map<String, Value>,
    path: &str,
) -> Option<(String, &'static str, &'static str)> {
    if matches!(directive(patch), Some("replace" | "delete")) {
        return None;
    }
    for (key, patch_value) in patch {
        let Some(dest_value) = dest.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        if key == DIRECTIVE || patch_value.is_null() {
            continue;
        }
        let field = format!("{path}.{key}");
        let (expected, got) = (node_kind(dest_value), node_kind(patch_value));
        if expected != got {
            return Some((field, expected, got));
        }
        if let (Value::Object(d), Value::Object(p)) = (dest_value, patch_value)
            && let Some(conflict) = kind_conflict(d, p, &field)
        {
            return Some(conflict);
        }
    }
    None
}

fn node_kind(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "MappingNode",
        Value::Array(_) => "SequenceNode",
        _ => "ScalarNode",
    }
}
