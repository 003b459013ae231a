//! Builtin transformers (namespace, prefix/suffix, labels, annotations, images, replicas)
//! and the field-spec walker they share.

pub(crate) mod fieldspecs;
pub(crate) mod images;
pub(crate) mod labels;
pub(crate) mod names;
pub(crate) mod namespace;
pub(crate) mod replicas;

use serde_json::{Map, Value};

use super::error::BuildError;
use super::file::FieldSpec;
use super::resmap::{ResId, ResMap};

/// Whether a field spec's GVK filter selects the object with id `id` (empty parts match all).
pub(crate) fn selects(spec: &FieldSpec, id: &ResId) -> bool {
    (spec.group.is_empty() || spec.group == id.group)
        && (spec.version.is_empty() || spec.version == id.version)
        && (spec.kind.is_empty() || spec.kind == id.kind)
}

/// Splits a field-spec path on `/`, honouring `\/` as an escaped slash inside a key.
pub(crate) fn path_segments(path: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                chars.next();
                out.last_mut().expect("never empty").push('/');
            }
            '/' => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Refuses a field spec without a path that selects an object of `map`, as kustomize does:
/// the path would name the object itself, which a transformer cannot replace.
pub(crate) fn refuse_empty_paths<'a>(
    map: &ResMap,
    specs: impl IntoIterator<Item = &'a FieldSpec>,
    file: &str,
    field: &str,
) -> Result<(), BuildError> {
    let empty: Vec<&FieldSpec> = specs
        .into_iter()
        .filter(|s| path_segments(&s.path).is_empty())
        .collect();
    if empty.is_empty() {
        return Ok(());
    }
    let selected = map
        .resources
        .iter()
        .map(|res| res.id())
        .find(|id| empty.iter().any(|s| selects(s, id)));
    match selected {
        None => Ok(()),
        Some(id) => Err(BuildError::Transform {
            file: file.to_string(),
            field: field.to_string(),
            message: format!("considering field '' of object {id}: cannot set or create an empty field name"),
        }),
    }
}

/// Calls `visit` on every value found at `path` below `node`. Lists met on the way are
/// entered element by element. With `create`, missing (or null) fields are created: maps for
/// intermediate keys, `leaf()` for the last one. A `key[]` segment names a list, which is
/// never created (a StatefulSet without `volumeClaimTemplates` gets none); a null there
/// becomes an empty list, as kustomize's field-spec walker makes it. An empty path visits
/// nothing: the object itself is no field.
pub(crate) fn visit_path<E>(
    node: &mut Value,
    path: &[String],
    create: bool,
    leaf: &dyn Fn() -> Value,
    visit: &mut dyn FnMut(&mut Value) -> Result<(), E>,
) -> Result<(), E> {
    if let Value::Array(items) = node {
        for item in items {
            visit_path(item, path, create, leaf, visit)?;
        }
        return Ok(());
    }
    let Some((first, rest)) = path.split_first() else {
        return Ok(());
    };
    let key = first.strip_suffix("[]").unwrap_or(first);
    let Value::Object(map) = node else { return Ok(()) };
    let is_list = first.ends_with("[]");
    if is_list && let Some(v @ Value::Null) = map.get_mut(key) {
        *v = Value::Array(Vec::new());
    }
    let missing = map.get(key).is_none_or(Value::is_null);
    if missing {
        if !create || is_list {
            return Ok(());
        }
        let fresh = if rest.is_empty() {
            leaf()
        } else {
            Value::Object(Map::new())
        };
        map.insert(key.to_string(), fresh);
    }
    let child = map.get_mut(key).expect("present or created");
    if rest.is_empty() {
        if let Value::Array(items) = child
            && is_list
        {
            for item in items {
                visit(item)?;
            }
            return Ok(());
        }
        return visit(child);
    }
    visit_path(child, rest, create, leaf, visit)
}

/// Rewrites the value at `spec`'s path in `obj` with `set`, creating it (as an empty
/// string) where the spec says so.
pub(crate) fn set_at(obj: &mut Value, spec: &FieldSpec, set: &dyn Fn(&mut Value)) {
    let _ = visit_path::<()>(
        obj,
        &path_segments(&spec.path),
        spec.create,
        &|| Value::String(String::new()),
        &mut |v| {
            set(v);
            Ok(())
        },
    );
}

/// Calls `change` on every value at `spec` of `res` (created as null when the spec says so).
pub(crate) fn change_at(res: &mut crate::resmap::Resource, spec: &FieldSpec, change: &dyn Fn(&mut Value)) {
    res.edit(|obj| {
        let _ = visit_path::<()>(
            obj,
            &path_segments(&spec.path),
            spec.create,
            &|| Value::Null,
            &mut |v| {
                change(v);
                Ok(())
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaped_slashes_stay_in_keys() {
        assert_eq!(
            path_segments("metadata/annotations/a.io\\/b"),
            vec!["metadata", "annotations", "a.io/b"]
        );
    }

    /// The values `visit_path` visits at `path`, creating missing fields (`leaf` last) with `create`.
    fn visited(node: &mut Value, path: &str, create: bool, leaf: Value) -> Vec<Value> {
        let mut seen = Vec::new();
        visit_path::<()>(node, &path_segments(path), create, &|| leaf.clone(), &mut |x| {
            seen.push(x.clone());
            Ok(())
        })
        .unwrap();
        seen
    }

    #[test]
    fn walks_lists_and_creates_only_when_asked() {
        let mut v = json!({"spec": {"items": [{"a": 1}, {"a": 2}]}});
        assert_eq!(
            visited(&mut v, "spec/items/a", false, Value::Null),
            vec![json!(1), json!(2)]
        );
        visited(&mut v, "spec/x/y", false, json!({}));
        assert!(v["spec"].get("x").is_none());
        visited(&mut v, "spec/x/y", true, json!({}));
        assert_eq!(v["spec"]["x"], json!({"y": {}}));
    }

    #[test]
    fn an_empty_path_names_no_field() {
        let mut v = json!({"kind": "Deployment"});
        assert!(visited(&mut v, "", true, json!(3)).is_empty());
        assert!(visited(&mut v, "/", true, json!(3)).is_empty());
        assert_eq!(v, json!({"kind": "Deployment"}));
    }

    #[test]
    fn list_segments_are_never_created_and_null_lists_become_empty() {
        let mut v = json!({"spec": {"template": {}}});
        visited(&mut v, "spec/claims[]/metadata/labels", true, json!({}));
        assert_eq!(v, json!({"spec": {"template": {}}}));
        let mut v = json!({"spec": {"claims": null}});
        visited(&mut v, "spec/claims[]/metadata/labels", true, json!({}));
        assert_eq!(v, json!({"spec": {"claims": []}}));
    }
}
