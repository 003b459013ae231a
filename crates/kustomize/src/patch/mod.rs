//! kustomize's two patch formats, their targets, and [`transformer`], which applies a
//! kustomization's patch entries to a build.
//!
//! [`parse`] tells a strategic merge patch from a JSON6902 patch the way kustomize's
//! PatchTransformer does (a document of maps is a strategic merge patch, a list of
//! operations is JSON6902); [`apply`] applies either to one object; [`target::Target`] decides
//! whether a `target` selects an object.

mod json6902;
pub(crate) mod schema;
mod smp;
pub(crate) mod target;
pub(crate) mod transformer;

use serde_json::Value;
use thiserror::Error;

use schema::CustomSchema;

pub(crate) use crate::selector::OriginalId;

/// A parsed patch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PatchDoc {
    pub(crate) kind: PatchKind,
    /// kustomize's `options` of a `patches` entry.
    pub(crate) options: PatchOptions,
}

/// The two patch formats.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PatchKind {
    /// One or more strategic merge documents (each a map), applied in order.
    StrategicMerge(Vec<serde_json::Map<String, Value>>),
    /// RFC 6902 operations, kept raw so that an unknown operation fails when applied with
    /// its index, as in kustomize.
    Json6902(Vec<Value>),
}

/// `options` of a kustomize `patches` entry: without them a strategic merge patch cannot
/// change the kind or the name of its target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PatchOptions {
    pub(crate) allow_name_change: bool,
    pub(crate) allow_kind_change: bool,
}

/// Why a patch could not be parsed, matched or applied.
#[derive(Debug, Error, PartialEq)]
pub(crate) enum PatchError {
    #[error("unable to parse SM or JSON patch from {origin}: {reason}")]
    Parse { origin: String, reason: String },
    #[error("json patch operation {index} ({op} {path:?}) failed: {reason}")]
    Json6902 {
        index: usize,
        op: String,
        path: String,
        reason: String,
    },
    #[error("strategic merge patch applied to a non-object")]
    NotAnObject,
    #[error("wrong node kind at '{path}': expected {expected} but got {got}")]
    WrongNodeKind {
        path: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("invalid patch target {field}: {reason}")]
    Selector { field: String, reason: String },
}

/// Parses the text of a patch. `origin` names the file, or "inline patch".
pub(crate) fn parse(text: &str, origin: &str) -> Result<PatchDoc, PatchError> {
    let kind = parse_kind(text).map_err(|reason| PatchError::Parse {
        origin: origin.to_string(),
        reason,
    })?;
    Ok(PatchDoc {
        kind,
        options: PatchOptions::default(),
    })
}

fn parse_kind(text: &str) -> Result<PatchKind, String> {
    if text.trim().is_empty() {
        return Err("the patch is empty".to_string());
    }
    // The engine's YAML layer, so that scalars in patches resolve as kyaml resolves them.
    let documents = super::yaml::parse_documents(text, "patch").map_err(|err| err.to_string())?;
    match documents.as_slice() {
        [Value::Array(ops)] => {
            if ops.iter().all(|op| op.get("op").is_some_and(Value::is_string)) {
                // kustomize reads JSON6902 operations with sigs.k8s.io/yaml (YAML 1.1:
                // `yes` and `on` are booleans).
                let mut documents =
                    super::yaml::parse_documents_yaml11(text, "patch").map_err(|err| err.to_string())?;
                match documents.pop() {
                    Some(Value::Array(ops)) => Ok(PatchKind::Json6902(ops)),
                    _ => unreachable!("the same text parsed as one list above"),
                }
            } else {
                Err("a list is a JSON6902 patch only when every item is an operation with \"op\"".to_string())
            }
        }
        [] => Err("the patch has no documents".to_string()),
        docs => docs
            .iter()
            .enumerate()
            .map(|(index, doc)| match doc {
                // kustomize reads each document as a resource: it needs a kind and a name.
                Value::Object(map)
                    if [&doc["kind"], &doc["metadata"]["name"]]
                        .iter()
                        .all(|v| v.as_str().is_some_and(|s| !s.is_empty())) =>
                {
                    Ok(map.clone())
                }
                Value::Object(_) => Err(format!(
                    "strategic merge patch document {index} has no kind or metadata.name"
                )),
                _ => Err(format!("strategic merge patch document {index} is not a map")),
            })
            .collect::<Result<_, _>>()
            .map(PatchKind::StrategicMerge),
    }
}

/// Applies `patch` to `target` and returns the patched object, or `Value::Null` when a
/// strategic merge patch deletes the object (`$patch: delete` at the top).
///
/// A strategic merge patch keeps the target's apiVersion and namespace, and its kind and
/// name unless the options allow changing them (as kustomize's `ApplySmPatch`).
/// Strategic-merge strategies come from `schema` when the build has a custom one.
pub(crate) fn apply(
    target: &Value,
    patch: &PatchDoc,
    schema: Option<&CustomSchema>,
) -> Result<Value, PatchError> {
    match &patch.kind {
        PatchKind::StrategicMerge(documents) => {
            let mut current = target.clone();
            for document in documents {
                current = apply_strategic_merge(&current, document, patch.options, schema)?;
                if current.is_null() {
                    break;
                }
            }
            Ok(current)
        }
        PatchKind::Json6902(ops) => json6902::apply(target, ops, json6902::MAX_GROWTH),
    }
}

/// Applies a JSON6902 `patch` allowing it to grow `target` by `limit` bytes of memory instead
/// of the production bound, so that a fuzzer's small inputs reach the bound; `None` for a
/// strategic merge patch.
#[cfg(feature = "fuzzing")]
pub(crate) fn apply_json6902_within(
    target: &Value,
    patch: &PatchDoc,
    limit: usize,
) -> Option<Result<Value, PatchError>> {
    match &patch.kind {
        PatchKind::Json6902(ops) => Some(json6902::apply(target, ops, limit)),
        PatchKind::StrategicMerge(_) => None,
    }
}

fn apply_strategic_merge(
    target: &Value,
    document: &serde_json::Map<String, Value>,
    options: PatchOptions,
    custom: Option<&CustomSchema>,
) -> Result<Value, PatchError> {
    let object = target.as_object().ok_or(PatchError::NotAnObject)?;
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or("");
    let ty = schema::root_type(text("apiVersion"), text("kind"), custom);
    if let Some((path, expected, got)) = smp::kind_conflict(object, document, "") {
        return Err(PatchError::WrongNodeKind { path, expected, got });
    }
    let Some(mut merged) = smp::merge_map(Some(object), document, ty) else {
        return Ok(Value::Null);
    };
    merged.insert(
        "apiVersion".into(),
        object.get("apiVersion").cloned().unwrap_or(Value::Null),
    );
    if !options.allow_kind_change {
        merged.insert("kind".into(), object.get("kind").cloned().unwrap_or(Value::Null));
    }
    let original_meta = object.get("metadata");
    let metadata = merged
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(metadata) = metadata.as_object_mut() {
        let mut restore = |key: &str| match original_meta.and_then(|m| m.get(key)) {
            Some(value) => {
                metadata.insert(key.to_string(), value.clone());
            }
            None => {
                metadata.remove(key);
            }
        };
        if !options.allow_name_change {
            restore("name");
        }
        restore("namespace");
    }
    Ok(Value::Object(merged))
}

#[cfg(test)]
mod tests;
