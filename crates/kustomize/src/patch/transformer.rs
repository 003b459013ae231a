//! Wires the patch formats of [`super`] into a build: `patchesStrategicMerge`,
//! `patches` and `patchesJson6902` entries are loaded (inline or from a file), their
//! targets found in the resource map, and the results put back in place (a deleted object
//! leaves the map; a renamed one keeps its earlier id for name references).

use std::path::Path;

use serde_json::{Map, Value};

use super::target::Target;
use super::{self as patch, OriginalId, PatchDoc, PatchKind, PatchOptions, schema, smp};
use crate::error::BuildError;
use crate::file::Patch;
use crate::loader::Loader;
use crate::resmap::{ResId, ResMap, annotations_as_strings};
use crate::selector::Selector;
use crate::yaml;

/// Where patch files are read from.
pub(crate) struct Context<'a> {
    pub(crate) loader: &'a Loader,
    pub(crate) dir: &'a Path,
    pub(crate) file: &'a Path,
}

impl Context<'_> {
    fn err(&self, message: impl std::fmt::Display) -> BuildError {
        BuildError::Patch {
            file: self.loader.show(self.file),
            message: message.to_string(),
        }
    }

    /// Parses patch text with kyaml's scalar rules (the text is normalized through this
    /// engine's YAML layer first, so `0755` or a plain date mean what they mean in
    /// resources).
    fn parse(&self, text: &str, origin: &str) -> Result<PatchDoc, BuildError> {
        let mut docs = yaml::parse_documents(text, origin)?;
        let operations =
            matches!(docs.as_slice(), [Value::Array(ops)] if ops.iter().all(|op| op.get("op").is_some()));
        if operations {
            docs = yaml::parse_documents_yaml11(text, origin)?;
        }
        patch::parse(&crate::printer::emit_documents(&docs), origin).map_err(|e| self.err(e))
    }

    /// The text of a `patches` entry: from `path`, or the inline `patch`.
    fn text_of(&self, entry: &Patch, field: &str) -> Result<(String, String), BuildError> {
        match (&entry.path, &entry.patch) {
            (Some(path), None) => {
                let p = self.dir.join(path);
                Ok((self.loader.read_text(&p, self.file)?, self.loader.show(&p)))
            }
            (None, Some(text)) => Ok((text.clone(), format!("inline patch in {field}"))),
            (Some(_), Some(_)) => {
                Err(self.err(format!("{field}: an entry may have a path or a patch, not both")))
            }
            (None, None) => Err(self.err(format!("{field}: an entry needs a path or a patch"))),
        }
    }
}

/// `patchesStrategicMerge`: each entry is a file path or inline YAML; every document is a
/// patch for the one object with its id.
pub(crate) fn strategic_merge(
    ctx: &Context<'_>,
    map: &mut ResMap,
    entries: &[String],
) -> Result<(), BuildError> {
    for entry in entries {
        if entry.trim().is_empty() {
            return Err(ctx.err("patchesStrategicMerge: patch appears to be empty"));
        }
        let path = ctx.dir.join(entry);
        let (text, origin) = if !entry.contains('\n') && ctx.loader.is_file(&path) {
            (ctx.loader.read_text(&path, ctx.file)?, ctx.loader.show(&path))
        } else if !entry.contains('\n') && !entry.contains(':') {
            // Looks like a path but is not a file: missing, or (it resolved) a directory.
            ctx.loader.resolve(&path, ctx.file)?;
            return Err(ctx.err(format!(
                "patchesStrategicMerge: read {}: is a directory",
                ctx.loader.show(&path)
            )));
        } else {
            (entry.clone(), "inline patch in patchesStrategicMerge".to_string())
        };
        let doc = ctx.parse(&text, &origin)?;
        let PatchKind::StrategicMerge(docs) = doc.kind else {
            return Err(ctx.err(format!(
                "{origin}: patchesStrategicMerge takes strategic merge patches, found a JSON6902 patch"
            )));
        };
        for d in docs {
            by_own_id(ctx, map, d, PatchOptions::default(), &origin)?;
        }
    }
    Ok(())
}

/// `patches`: strategic merge or JSON6902, with an optional target selector.
pub(crate) fn patches(ctx: &Context<'_>, map: &mut ResMap, entries: &[Patch]) -> Result<(), BuildError> {
    for entry in entries {
        let (text, origin) = ctx.text_of(entry, "patches")?;
        let mut doc = ctx.parse(&text, &origin)?;
        doc.options = options(entry);
        match (&doc.kind, &entry.target) {
            (_, Some(target)) => by_selector(ctx, map, &doc, target, &origin)?,
            (PatchKind::Json6902(_), None) => {
                return Err(ctx.err(format!("{origin}: a JSON6902 patch must specify a target")));
            }
            (PatchKind::StrategicMerge(docs), None) => {
                for d in docs.clone() {
                    by_own_id(ctx, map, d, doc.options, &origin)?;
                }
            }
        }
    }
    Ok(())
}

/// `patchesJson6902`: JSON6902 operations (JSON or YAML) for a required target.
pub(crate) fn json6902(ctx: &Context<'_>, map: &mut ResMap, entries: &[Patch]) -> Result<(), BuildError> {
    for entry in entries {
        let (text, origin) = ctx.text_of(entry, "patchesJson6902")?;
        let doc = ctx.parse(&text, &origin)?;
        if !matches!(doc.kind, PatchKind::Json6902(_)) {
            return Err(ctx.err(format!(
                "{origin}: patchesJson6902 takes a list of JSON6902 operations"
            )));
        }
        let Some(target) = &entry.target else {
            return Err(ctx.err(format!("{origin}: patchesJson6902 entries need a target")));
        };
        by_selector(ctx, map, &doc, target, &origin)?;
    }
    Ok(())
}

fn options(entry: &Patch) -> PatchOptions {
    PatchOptions {
        allow_name_change: entry.options.get("allowNameChange").copied().unwrap_or(false),
        allow_kind_change: entry.options.get("allowKindChange").copied().unwrap_or(false),
    }
}

/// A strategic merge document without target patches the one object whose (any) id equals
/// the document's own id.
fn by_own_id(
    ctx: &Context<'_>,
    map: &mut ResMap,
    document: Map<String, Value>,
    options: PatchOptions,
    origin: &str,
) -> Result<(), BuildError> {
    let id = ResId::of(&document);
    let matches: Vec<usize> = (0..map.resources.len())
        .filter(|&i| map.resources[i].any_id(|r| r.same_as(&id)))
        .collect();
    match matches.as_slice() {
        [i] => {
            let doc = PatchDoc {
                kind: PatchKind::StrategicMerge(vec![document]),
                options,
            };
            apply_at(ctx, map, *i, &doc, origin).map(|_| ())
        }
        [] => Err(ctx.err(format!("no resource matches strategic merge patch \"{id}\""))),
        _ => Err(ctx.err(format!("multiple resources match strategic merge patch \"{id}\""))),
    }
}

/// Applies `doc` to every object `target` selects. kustomize v5.8.1 accepts a target that
/// selects nothing, and so does this engine (a shared patch may target kinds a build does not
/// have), but it warns: a typo in a target otherwise goes unnoticed.
fn by_selector(
    ctx: &Context<'_>,
    map: &mut ResMap,
    doc: &PatchDoc,
    target: &Selector,
    origin: &str,
) -> Result<(), BuildError> {
    let selector = target;
    let target = Target::compile(selector).map_err(|e| ctx.err(e))?;
    let selected: Vec<usize> = (0..map.resources.len())
        .filter(|&i| {
            let res = &map.resources[i];
            let original = OriginalId {
                name: &res.orig.name,
                namespace: &res.orig.namespace,
            };
            target.selects(&res.obj(), Some(original))
        })
        .collect();
    if selected.is_empty() {
        map.warnings.push(format!(
            "{}: patch target {} matches no resource",
            ctx.loader.show(ctx.file),
            describe(selector)
        ));
    }
    // Walk backwards so removing a deleted object keeps the earlier indices valid.
    for &i in selected.iter().rev() {
        let mut doc = doc.clone();
        if let PatchKind::StrategicMerge(docs) = &mut doc.kind {
            let id = map.resources[i].id();
            let api_version = map.resources[i]
                .obj()
                .get("apiVersion")
                .cloned()
                .unwrap_or(Value::Null);
            for d in docs.iter_mut() {
                let meta = d.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(meta) = meta {
                    if !doc.options.allow_name_change || !meta.contains_key("name") {
                        meta.insert("name".into(), Value::String(id.name.clone()));
                    }
                    if id.namespace.is_empty() {
                        meta.remove("namespace");
                    } else {
                        meta.insert("namespace".into(), Value::String(id.namespace.clone()));
                    }
                }
                if !doc.options.allow_kind_change || !d.contains_key("kind") {
                    d.insert("kind".into(), Value::String(id.kind.clone()));
                    d.insert("apiVersion".into(), api_version.clone());
                }
            }
        }
        apply_at(ctx, map, i, &doc, origin)?;
    }
    Ok(())
}

/// Applies a patch (from `origin`) to resource `i`; returns false when the patch deleted it.
fn apply_at(
    ctx: &Context<'_>,
    map: &mut ResMap,
    i: usize,
    doc: &PatchDoc,
    origin: &str,
) -> Result<bool, BuildError> {
    let res = &mut map.resources[i];
    let before = res.id();
    // kustomize runs JSON6902 patches while its index annotations sit on every object, so
    // `metadata.annotations` always exists for them; it disappears again when left empty.
    let mut input = res.obj().into_owned();
    let add_annotations = matches!(doc.kind, PatchKind::Json6902(_))
        && input
            .get("metadata")
            .is_none_or(|m| m.get("annotations").is_none_or(Value::is_null));
    if add_annotations {
        let meta = input
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert("annotations".into(), Value::Object(Map::new()));
        }
    }
    // The first strategic merge drops the object's implicit nulls; a JSON6902 patch writes
    // them out as `null` (kustomize goes through JSON), so no later merge drops them.
    let implicit_nulls = std::mem::take(&mut res.implicit_nulls);
    if matches!(doc.kind, PatchKind::StrategicMerge(_)) && !implicit_nulls.is_empty() {
        let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let ty = schema::root_type(&text("apiVersion"), &text("kind"), map.schema.custom());
        smp::drop_implicit_nulls(&mut input, &implicit_nulls, ty);
    }
    let mut patched = patch::apply(&Value::Object(input), doc, map.schema.custom())
        .map_err(|e| ctx.err(format!("{origin}: {before}: {e}")))?;
    if matches!(doc.kind, PatchKind::Json6902(_))
        && let Some(Value::Object(meta)) = patched.get_mut("metadata")
    {
        if add_annotations
            && meta
                .get("annotations")
                .is_some_and(|a| a.as_object().is_some_and(Map::is_empty))
        {
            meta.remove("annotations");
        }
        annotations_as_strings(meta);
    }
    match patched {
        Value::Null => {
            map.resources.remove(i);
            Ok(false)
        }
        Value::Object(obj) => {
            res.replace(obj);
            let after = res.id();
            if after.name != before.name || after.namespace != before.namespace || after.kind != before.kind {
                res.prev.push(before);
            }
            res.pack();
            Ok(true)
        }
        other => Err(ctx.err(format!("{before}: patch produced {}", yaml::kind_of(&other)))),
    }
}

/// A selector as `field=value` pairs of the fields it sets, for messages.
fn describe(selector: &Selector) -> String {
    let set: Vec<String> = selector
        .set_fields()
        .map(|(field, value)| format!("{field}={value:?}"))
        .collect();
    if set.is_empty() {
        "(empty)".to_string()
    } else {
        set.join(" ")
    }
}
