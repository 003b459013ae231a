//! `replacements:`: copy one field of a source object (or a literal `sourceValue`) into
//! fields of the selected targets, after the kustomization's other transformers.
//!
//! Field paths are kyaml's: `.`-separated keys (`\.` escapes a dot, `[a.b/c]` keeps a key
//! with dots whole), `[name=value]` picks list elements whose field matches `value` as an
//! unanchored regex, `[=value]` picks scalar elements, a number indexes a list and `*` takes
//! every element of a list. With `create`, missing keys, a missing `[name=value]` element and
//! the element just past the end of a list are created.

use std::path::Path;

use regex::Regex;
use serde_json::{Map, Value};

use super::error::BuildError;
use super::file::{
    Replacement, ReplacementField, ReplacementOptions as Options, ReplacementSource as Source,
    ReplacementTarget as Target,
};
use super::loader::Loader;
use super::resmap::{ResId, ResMap, Resource, annotations_as_strings};
use super::selector::{CompiledSelector, Namespacing, Selector};
use super::yaml;

const DEFAULT_FIELD_PATH: &str = "metadata.name";

/// How a scalar was typed where it was read: a target keeps its own type when a value is
/// copied into it; a created field takes the type its text reads as.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tag {
    Str,
    Int,
    Float,
    Bool,
    Untyped,
}

/// The value being copied.
#[derive(Clone, Debug)]
enum Payload {
    Scalar { text: String, tag: Tag },
    Node(Value),
}

impl Payload {
    fn of(v: &Value) -> Payload {
        match v {
            Value::Object(_) | Value::Array(_) => Payload::Node(v.clone()),
            other => {
                let (text, tag) = scalar_parts(other);
                Payload::Scalar { text, tag }
            }
        }
    }

    fn into_value(self) -> Value {
        match self {
            Payload::Scalar { text, tag } => typed(&text, tag),
            Payload::Node(v) => v,
        }
    }
}

fn scalar_parts(v: &Value) -> (String, Tag) {
    match v {
        Value::String(s) => (s.clone(), Tag::Str),
        Value::Bool(b) => (b.to_string(), Tag::Bool),
        Value::Number(n) if n.is_f64() => (n.to_string(), Tag::Float),
        Value::Number(n) => (n.to_string(), Tag::Int),
        _ => (String::new(), Tag::Untyped),
    }
}

/// `text` as a value of type `tag`; text that cannot have that type stays a string.
fn typed(text: &str, tag: Tag) -> Value {
    match tag {
        Tag::Str => Value::String(text.to_string()),
        Tag::Untyped => resolve(text),
        Tag::Int | Tag::Float | Tag::Bool => match resolve(text) {
            v @ (Value::Number(_) | Value::Bool(_)) => v,
            _ => Value::String(text.to_string()),
        },
    }
}

/// A plain YAML scalar's value, as goyaml reads it.
fn resolve(text: &str) -> Value {
    match text {
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        _ => yaml::resolve_plain(text),
    }
}

/// The replacements of one kustomization, files read.
pub(crate) fn load(
    loader: &Loader,
    dir: &Path,
    file: &Path,
    shown: &str,
    fields: &[ReplacementField],
) -> Result<Vec<Replacement>, BuildError> {
    let mut out = Vec::new();
    for field in fields {
        if field.path.is_empty() {
            out.push(Replacement {
                source: field.source.clone(),
                targets: field.targets.clone(),
                source_value: field.source_value.clone(),
            });
            continue;
        }
        if field.source.is_some() || field.targets.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(error(
                shown,
                "cannot specify both path and inline replacement".into(),
            ));
        }
        let path = dir.join(&field.path);
        let text = loader.read_text(&path, file)?;
        let origin = loader.show(&path);
        let doc = yaml::parse_documents_yaml11(&text, &origin)?
            .into_iter()
            .next()
            .unwrap_or(Value::Null);
        let invalid = |e: serde_json::Error| BuildError::Invalid {
            file: origin.clone(),
            field: "replacements".into(),
            message: e.to_string(),
        };
        match doc {
            Value::Array(_) => out.extend(serde_json::from_value::<Vec<Replacement>>(doc).map_err(invalid)?),
            Value::Object(_) => out.push(serde_json::from_value(doc).map_err(invalid)?),
            other => {
                return Err(error(
                    &origin,
                    format!(
                        "unsupported replacement type encountered within replacement path: {}",
                        yaml::kind_of(&other)
                    ),
                ));
            }
        }
    }
    Ok(out)
}

fn error(file: &str, message: String) -> BuildError {
    BuildError::Transform {
        file: file.to_string(),
        field: "replacements".into(),
        message,
    }
}

/// Runs every replacement, in order, over the objects accumulated so far.
pub(crate) fn apply(map: &mut ResMap, replacements: &[Replacement], file: &str) -> Result<(), BuildError> {
    for r in replacements {
        let targets = match (&r.source, &r.source_value, &r.targets) {
            (None, None, _) | (_, _, None) => {
                return Err(error(
                    file,
                    "replacements must specify a source and at least one target".into(),
                ));
            }
            (Some(_), Some(_), _) => {
                return Err(error(
                    file,
                    "value and resource selectors are mutually exclusive".into(),
                ));
            }
            (_, _, Some(targets)) => targets,
        };
        let value = match (&r.source, &r.source_value) {
            (_, Some(v)) => Payload::Scalar {
                text: v.clone(),
                tag: Tag::Str,
            },
            (Some(source), None) => source_value(map, source).map_err(|m| error(file, m))?,
            (None, None) => unreachable!("refused above"),
        };
        for target in targets {
            apply_target(map, &value, target).map_err(|m| error(file, m))?;
        }
    }
    if !replacements.is_empty() {
        map.each(|res| {
            let needed = res
                .obj()
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(Value::as_object)
                .is_some_and(|a| a.values().any(|v| !v.is_string()));
            if needed {
                annotations_as_strings(res.metadata_mut());
            }
        });
    }
    Ok(())
}

fn source_value(map: &ResMap, source: &Source) -> Result<Payload, String> {
    let wanted = ResId {
        group: source.group.clone(),
        version: source.version.clone(),
        kind: source.kind.clone(),
        name: source.name.clone(),
        namespace: source.namespace.clone(),
    };
    let selected = |id: &ResId| {
        (wanted.name.is_empty() || wanted.name == id.name)
            && (wanted.namespace.is_empty() || wanted.effective_namespace() == id.effective_namespace())
            && (wanted.group.is_empty() || wanted.group == id.group)
            && (wanted.version.is_empty() || wanted.version == id.version)
            && (wanted.kind.is_empty() || wanted.kind == id.kind)
    };
    let mut found = map.resources.iter().filter(|r| r.any_id(selected));
    let shown = describe(source);
    let res = found
        .next()
        .ok_or_else(|| format!("nothing selected by {shown}"))?;
    if found.next().is_some() {
        return Err(format!("multiple matches for selector {shown}"));
    }
    let field_path = if source.field_path.is_empty() {
        DEFAULT_FIELD_PATH
    } else {
        &source.field_path
    };
    let obj = Value::Object(res.obj().into_owned());
    let found = lookup(&obj, &split_path(field_path))
        .filter(|v| {
            !(v.is_null()
                || v.as_object().is_some_and(Map::is_empty)
                || v.as_array().is_some_and(Vec::is_empty))
        })
        .ok_or_else(|| {
            format!(
                "fieldPath `{field_path}` is missing for replacement source {}",
                id_text(&wanted)
            )
        })?;
    let value = Payload::of(found);
    let Some(options) = source.options.as_ref().filter(|o| !o.delimiter.is_empty()) else {
        return Ok(value);
    };
    let Payload::Scalar { text, tag } = value else {
        return Err("delimiter option can only be used with scalar nodes".into());
    };
    let parts: Vec<&str> = text.split(options.delimiter.as_str()).collect();
    let part = usize::try_from(options.index)
        .ok()
        .and_then(|i| parts.get(i))
        .ok_or_else(|| {
            format!(
                "options.index {} is out of bounds for value {text}",
                options.index
            )
        })?;
    Ok(Payload::Scalar {
        text: part.to_string(),
        tag,
    })
}

/// kustomize's spelling of a resource id in replacement messages.
fn id_text(id: &ResId) -> String {
    let or = |s: &str, empty: &str| {
        if s.is_empty() {
            empty.to_string()
        } else {
            s.to_string()
        }
    };
    format!(
        "{}.{}.{}/{}.{}",
        or(&id.kind, "[noKind]"),
        or(&id.version, "[noVer]"),
        or(&id.group, "[noGrp]"),
        or(&id.name, "[noName]"),
        or(&id.namespace, "[noNs]")
    )
}

fn describe(source: &Source) -> String {
    let id = ResId {
        group: source.group.clone(),
        version: source.version.clone(),
        kind: source.kind.clone(),
        name: source.name.clone(),
        namespace: source.namespace.clone(),
    };
    let mut out = id_text(&id);
    if !source.field_path.is_empty() {
        out.push(':');
        out.push_str(&source.field_path);
    }
    out
}

/// A selector's group/version/kind/name/namespace as anchored regexes (empty selects all).
struct IdPattern([Option<Regex>; 5]);

impl IdPattern {
    fn compile(s: &Selector) -> Result<IdPattern, String> {
        let one = |p: &Option<String>| {
            p.as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| Regex::new(&format!("^(?:{p})$")).map_err(|e| e.to_string()))
                .transpose()
        };
        Ok(IdPattern([
            one(&s.group)?,
            one(&s.version)?,
            one(&s.kind)?,
            one(&s.name)?,
            one(&s.namespace)?,
        ]))
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    fn matches(&self, id: &ResId) -> bool {
        let fields = [&id.group, &id.version, &id.kind, &id.name, &id.namespace];
        self.0
            .iter()
            .zip(fields)
            .all(|(re, v)| re.as_ref().is_none_or(|re| re.is_match(v)))
    }
}

/// The label and annotation part of a selector.
fn meta_selector(s: &Selector) -> Result<CompiledSelector, String> {
    CompiledSelector::compile(&Selector {
        label_selector: s.label_selector.clone(),
        annotation_selector: s.annotation_selector.clone(),
        ..Selector::default()
    })
    .map_err(|e| format!("{}: {}", e.field, e.problem))
}

fn apply_target(map: &mut ResMap, value: &Payload, target: &Target) -> Result<(), String> {
    let select = target
        .select
        .as_ref()
        .ok_or_else(|| "target must specify resources to select".to_string())?;
    let ids = IdPattern::compile(select)?;
    let meta = meta_selector(select)?;
    let rejects = target
        .reject
        .iter()
        .map(|r| Ok((IdPattern::compile(r)?, meta_selector(r)?, r)))
        .collect::<Result<Vec<_>, String>>()?;
    let default_paths = [DEFAULT_FIELD_PATH.to_string()];
    let paths = if target.field_paths.is_empty() {
        &default_paths[..]
    } else {
        &target.field_paths[..]
    };
    map.try_each(|res| {
        let chosen = {
            let obj = res.obj();
            let meta_ok = meta.matches(&obj, Namespacing::AsWritten)
                && !rejects.iter().any(|(_, m, r)| {
                    (r.label_selector.is_some() || r.annotation_selector.is_some())
                        && m.matches(&obj, Namespacing::AsWritten)
                });
            meta_ok
                && !rejects
                    .iter()
                    .any(|(p, _, _)| !p.is_empty() && all_ids(res).iter().any(|id| p.matches(id)))
                && all_ids(res).iter().any(|id| ids.matches(id))
        };
        if !chosen {
            return Ok(());
        }
        res.edit(|obj| {
            paths
                .iter()
                .try_for_each(|path| copy_to(obj, value, path, target.options.as_ref()))
        })
    })
}

/// The current id and every earlier one.
fn all_ids(res: &Resource) -> Vec<ResId> {
    let mut ids = vec![res.id()];
    ids.push(res.orig.clone());
    ids.extend(res.prev.iter().cloned());
    ids
}

fn copy_to(obj: &mut Value, value: &Payload, path: &str, options: Option<&Options>) -> Result<(), String> {
    let create = options.is_some_and(|o| o.create).then_some(match value {
        Payload::Node(Value::Object(_)) => Fresh::Map,
        Payload::Node(_) => Fresh::Seq,
        Payload::Scalar { .. } => Fresh::Scalar,
    });
    let mut set = |field: &mut Value| set_field(field, value, options);
    let found = walk(obj, &split_path(path), create, &mut set)?;
    if found == 0 {
        let what = if create.is_some() {
            "find or create"
        } else {
            "find"
        };
        return Err(format!("unable to {what} field \"{path}\" in replacement target"));
    }
    Ok(())
}

fn set_field(field: &mut Value, value: &Payload, options: Option<&Options>) -> Result<(), String> {
    let mut value = value.clone();
    if let Some(o) = options.filter(|o| !o.delimiter.is_empty()) {
        if matches!(field, Value::Object(_) | Value::Array(_)) {
            return Err("delimiter option can only be used with scalar nodes".into());
        }
        let current = scalar_parts(field).0;
        let mut parts: Vec<String> = current.split(o.delimiter.as_str()).map(str::to_string).collect();
        let text = match &value {
            Payload::Scalar { text, .. } => text.clone(),
            Payload::Node(_) => String::new(),
        };
        match usize::try_from(o.index) {
            Err(_) => parts.insert(0, text),
            Ok(i) if i >= parts.len() => parts.push(text),
            Ok(i) => parts[i] = text,
        }
        let tag = match value {
            Payload::Scalar { tag, .. } => tag,
            Payload::Node(_) => Tag::Untyped,
        };
        value = Payload::Scalar {
            text: parts.join(&o.delimiter),
            tag,
        };
    }
    *field = match (&*field, value) {
        // A scalar keeps its own type; only the text is copied.
        (Value::String(_) | Value::Number(_) | Value::Bool(_), Payload::Scalar { text, .. }) => {
            typed(&text, scalar_parts(field).1)
        }
        (Value::Null, Payload::Scalar { text, .. }) => resolve(&text),
        (_, v) => v.into_value(),
    };
    Ok(())
}

/// What a created field starts as.
#[derive(Clone, Copy, Debug)]
enum Fresh {
    Scalar,
    Map,
    Seq,
}

fn fresh(next: Option<&String>, leaf: Fresh) -> Value {
    match next {
        Some(n) if is_list_index(n) || is_index(n) => Value::Array(Vec::new()),
        Some(_) => Value::Object(Map::new()),
        None => match leaf {
            Fresh::Scalar => Value::Null,
            Fresh::Map => Value::Object(Map::new()),
            Fresh::Seq => Value::Array(Vec::new()),
        },
    }
}

fn is_index(p: &str) -> bool {
    !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
}

fn is_list_index(p: &str) -> bool {
    p.starts_with('[') && p.ends_with(']')
}

/// The text a list element's field is matched against.
fn match_text(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => v.to_string(),
        other => scalar_parts(other).0,
    }
}

fn wrong_kind(node: &Value) -> String {
    format!(
        "wrong node kind: expected SequenceNode but got {}",
        match node {
            Value::Object(_) => "MappingNode",
            _ => "ScalarNode",
        }
    )
}

/// Calls `set` on every field `path` reaches below `node` (creating what `create` allows) and
/// returns how many there were.
fn walk(
    node: &mut Value,
    path: &[String],
    create: Option<Fresh>,
    set: &mut dyn FnMut(&mut Value) -> Result<(), String>,
) -> Result<usize, String> {
    let Some((first, rest)) = path.split_first() else {
        set(node)?;
        return Ok(1);
    };
    let leaf = create.unwrap_or(Fresh::Scalar);
    if is_index(first) {
        let Value::Array(items) = node else {
            return Err(wrong_kind(node));
        };
        let idx: usize = first.parse().map_err(|e| format!("{e}"))?;
        if idx == items.len() && create.is_some() {
            items.push(fresh(rest.first(), leaf));
        }
        let len = items.len();
        let item = items
            .get_mut(idx)
            .ok_or_else(|| format!("index {idx} specified but only {len} elements found"))?;
        return walk(item, rest, create, set);
    }
    if is_list_index(first) {
        let inner = &first[1..first.len() - 1];
        let (field, pattern) = inner.split_once('=').ok_or_else(|| {
            "list path element must contain fieldName=fieldValue for element to match".to_string()
        })?;
        let re = Regex::new(pattern).map_err(|e| e.to_string())?;
        let Value::Array(_) = node else {
            return Err(wrong_kind(node));
        };
        for attempt in 0..2 {
            let Value::Array(items) = &mut *node else {
                unreachable!("checked above")
            };
            let mut found = 0;
            for item in items.iter_mut() {
                if field.is_empty() {
                    if re.is_match(match_text(item).trim()) {
                        set(item)?;
                        found += 1;
                    }
                } else if let Some(v) = item.get(field).filter(|v| !v.is_null())
                    && re.is_match(match_text(v).trim())
                {
                    found += walk(item, rest, create, set)?;
                }
            }
            if found > 0 || create.is_none() || attempt == 1 {
                return Ok(found);
            }
            items.push(if field.is_empty() {
                resolve(pattern)
            } else {
                let mut m = Map::new();
                m.insert(field.to_string(), resolve(pattern));
                Value::Object(m)
            });
        }
        return Ok(0);
    }
    if first == "*" {
        let Value::Array(items) = node else {
            return Err(wrong_kind(node));
        };
        let mut found = 0;
        for item in items {
            found += walk(item, rest, create, set)?;
        }
        return Ok(found);
    }
    if node.is_null() && create.is_some() {
        *node = Value::Object(Map::new());
    }
    let Value::Object(map) = node else {
        return if create.is_some() {
            Err(format!("wrong node kind: expected MappingNode for field {first}"))
        } else {
            Ok(0)
        };
    };
    if !map.contains_key(first.as_str()) {
        if create.is_none() {
            return Ok(0);
        }
        map.insert(first.clone(), fresh(rest.first(), leaf));
    }
    let child = map.get_mut(first.as_str()).expect("present or created");
    if child.is_string() && !rest.is_empty() {
        // A path into structured text held in a string is not followed.
        return Ok(0);
    }
    walk(child, rest, create, set)
}

/// A source field, as kyaml's lookup reads it: `[name=value]` matches exactly here.
pub(crate) fn lookup<'a>(node: &'a Value, path: &[String]) -> Option<&'a Value> {
    let Some((first, rest)) = path.split_first() else {
        return Some(node);
    };
    let next = if is_index(first) {
        node.as_array()?.get(first.parse::<usize>().ok()?)?
    } else if is_list_index(first) {
        let (field, value) = first[1..first.len() - 1].split_once('=')?;
        node.as_array()?.iter().find(|item| {
            let v = if field.is_empty() {
                Some(*item)
            } else {
                item.get(field)
            };
            v.is_some_and(|v| match_text(v) == value)
        })?
    } else {
        node.as_object()?.get(first.as_str())?
    };
    lookup(next, rest)
}

/// kyaml's smarter path splitter: `.` separates, `\.` escapes, and a `[...]` part spanning
/// dots stays whole (its brackets dropped unless it holds `=`).
pub(crate) fn split_path(path: &str) -> Vec<String> {
    let mut raw: Vec<String> = Vec::new();
    let pieces: Vec<&str> = path.split('.').collect();
    let pieces = if pieces.len() > 1 && pieces[0].is_empty() {
        &pieces[1..]
    } else {
        &pieces[..]
    };
    for piece in pieces {
        match raw.last_mut() {
            Some(last) if last.ends_with('\\') => {
                last.pop();
                last.push('.');
                last.push_str(piece);
            }
            _ => raw.push(piece.to_string()),
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let elem = &raw[i];
        if elem.starts_with('[') && !elem.ends_with(']') {
            let mut joined = vec![elem.clone()];
            while i < raw.len() - 1 {
                i += 1;
                joined.push(raw[i].clone());
                if raw[i].ends_with(']') {
                    break;
                }
            }
            let text = joined.join(".");
            if text.contains('=') {
                out.push(text);
            } else {
                out.push(text.trim_matches(['[', ']']).to_string());
            }
        } else {
            out.push(elem.clone());
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_split_like_kyaml() {
        assert_eq!(
            split_path(".metadata.annotations.[cert-manager.io/inject-ca-from]"),
            vec!["metadata", "annotations", "cert-manager.io/inject-ca-from"]
        );
        assert_eq!(
            split_path("spec.containers.[name=app.v1].image"),
            vec!["spec", "containers", "[name=app.v1]", "image"]
        );
        assert_eq!(split_path("data.a\\.b"), vec!["data", "a.b"]);
    }

    fn copy(obj: &mut Value, value: Value, path: &str, create: bool) -> Result<(), String> {
        let options = Options {
            create,
            ..Options::default()
        };
        copy_to(obj, &Payload::of(&value), path, Some(&options))
    }

    #[test]
    fn a_scalar_target_keeps_its_type_and_a_created_one_reads_its_text() {
        let mut obj = json!({"spec": {"port": 8080, "host": "x"}});
        copy(&mut obj, json!("9090"), "spec.port", false).unwrap();
        copy(&mut obj, json!(80), "spec.host", false).unwrap();
        copy(&mut obj, json!("443"), "spec.extra.port", true).unwrap();
        assert_eq!(
            obj,
            json!({"spec": {"port": 9090, "host": "80", "extra": {"port": 443}}})
        );
    }

    #[test]
    fn list_selectors_match_as_unanchored_regexes_and_create_elements() {
        let mut obj = json!({"c": [{"name": "app"}, {"name": "app-sidecar"}, {"name": "db"}]});
        copy(&mut obj, json!("v"), "c.[name=app].image", true).unwrap();
        copy(&mut obj, json!("w"), "c.[name=cache].image", true).unwrap();
        assert_eq!(
            obj,
            json!({"c": [{"name": "app", "image": "v"}, {"name": "app-sidecar", "image": "v"}, {"name": "db"}, {"name": "cache", "image": "w"}]})
        );
    }

    #[test]
    fn a_missing_field_without_create_is_an_error() {
        let mut obj = json!({"spec": {}});
        assert_eq!(
            copy(&mut obj, json!("v"), "spec.x", false).unwrap_err(),
            "unable to find field \"spec.x\" in replacement target"
        );
    }

    fn replacements(text: &str) -> Vec<Replacement> {
        let doc = yaml::parse_documents_yaml11(text, "r").unwrap().remove(0);
        serde_json::from_value(doc).unwrap()
    }

    fn cm(name: &str, namespace: &str) -> Resource {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"k": "v"}});
        Resource::new(obj.as_object().unwrap().clone())
    }

    #[test]
    fn sources_must_select_exactly_one_object() {
        let mut map = ResMap {
            resources: vec![cm("a", "ns1"), cm("a", "ns2")],
            ..ResMap::default()
        };
        let r = "- source: {kind: ConfigMap, name: b}\n  targets: [{select: {kind: ConfigMap}}]\n";
        assert_eq!(
            apply(&mut map, &replacements(r), "k").unwrap_err().to_string(),
            "k: replacements: nothing selected by ConfigMap.[noVer].[noGrp]/b.[noNs]"
        );
        let r = "- source: {kind: ConfigMap, name: a, fieldPath: data.k}\n  targets: [{select: {kind: ConfigMap}}]\n";
        assert_eq!(
            apply(&mut map, &replacements(r), "k").unwrap_err().to_string(),
            "k: replacements: multiple matches for selector ConfigMap.[noVer].[noGrp]/a.[noNs]:data.k"
        );
        let r = "- source: {kind: ConfigMap, name: a, namespace: ns2, fieldPath: data.k}\n  targets: [{select: {namespace: ns1}, fieldPaths: [data.k2], options: {create: true}}]\n";
        apply(&mut map, &replacements(r), "k").unwrap();
        assert_eq!(map.resources[0].obj()["data"], json!({"k": "v", "k2": "v"}));
    }

    #[test]
    fn delimiters_replace_one_part() {
        let mut obj = json!({"a": "x.y.z"});
        let options = Options {
            delimiter: ".".into(),
            index: 1,
            ..Options::default()
        };
        copy_to(&mut obj, &Payload::of(&json!("q")), "a", Some(&options)).unwrap();
        assert_eq!(obj, json!({"a": "x.q.z"}));
    }
}
