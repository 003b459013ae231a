//! A kustomization's `openapi: {path: ...}` schema: a Swagger document (JSON or YAML) whose
//! `definitions` name their kinds in `x-kubernetes-group-version-kind` and whose properties
//! carry strategic-merge strategies. As in kustomize, such a schema replaces the builtin one
//! for every patch of the build: a kind it does not define has no merge keys, builtin kinds
//! included. A list merges by key only when its property has an
//! `x-kubernetes-patch-strategy` containing `merge`; the keys are its
//! `x-kubernetes-list-map-keys`, else its `x-kubernetes-patch-merge-key`, and without
//! either a list of scalars merges as a set. Fields and list items follow `$ref`s.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::schema::{Keys, ListMerge, SchemaType};

/// The schema a build's patches use. kustomize keeps one per build: the first kustomization
/// loaded with an `openapi` field (the root before its bases, a base before its later
/// siblings) picks it, and later ones are ignored.
#[derive(Clone, Debug, Default)]
pub(crate) enum SchemaChoice {
    /// No kustomization so far had `openapi`: the builtin schema, until one picks.
    #[default]
    Unset,
    /// `openapi: {version: ...}` picked the builtin schema.
    Builtin,
    Custom(Arc<CustomSchema>),
}

impl SchemaChoice {
    pub(crate) fn custom(&self) -> Option<&CustomSchema> {
        match self {
            SchemaChoice::Custom(schema) => Some(schema),
            _ => None,
        }
    }
}

/// A parsed custom schema.
#[derive(Debug, PartialEq)]
pub(crate) struct CustomSchema {
    definitions: Map<String, Value>,
    /// (group, version, kind) to the name of its definition.
    kinds: Vec<((String, String, String), String)>,
}

/// Bounds `$ref` chains, which may be cyclic.
const MAX_REF_DEPTH: usize = 32;

impl CustomSchema {
    /// Reads the schema text of file `origin`.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<CustomSchema, String> {
        let doc = match serde_json::from_str::<Value>(text) {
            Ok(doc) => doc,
            Err(_) => crate::yaml::parse_documents(text, origin)
                .map_err(|e| format!("invalid schema file: {e}"))?
                .into_iter()
                .next()
                .unwrap_or(Value::Null),
        };
        let Some(Value::Object(definitions)) = doc.get("definitions").cloned() else {
            return Err(format!("invalid schema file {origin}: no 'definitions' map"));
        };
        let mut kinds = Vec::new();
        for (name, definition) in &definitions {
            let gvks = definition
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array);
            for gvk in gvks.into_iter().flatten() {
                let text = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or("").to_string();
                kinds.push(((text("group"), text("version"), text("kind")), name.clone()));
            }
        }
        Ok(CustomSchema { definitions, kinds })
    }

    /// The schema type of an object's top level: its kind's definition, or nothing known.
    pub(crate) fn root_type(&self, group: &str, version: &str, kind: &str) -> SchemaType<'_> {
        self.kinds
            .iter()
            .find(|((g, v, k), _)| g == group && v == version && k == kind)
            .and_then(|(_, name)| self.definitions.get(name))
            .map_or(SchemaType::Unknown, |node| SchemaType::Custom(self, node))
    }

    /// The type of property `field` of `node`, and how it merges if it is a list.
    pub(crate) fn field<'s>(&'s self, node: &'s Value, field: &str) -> (SchemaType<'s>, ListMerge<'s>) {
        let Some(property) = self.resolve(node).get("properties").and_then(|p| p.get(field)) else {
            return (SchemaType::Unknown, ListMerge::Replace);
        };
        let strategy = property
            .get("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .unwrap_or("");
        let merge = if !strategy.contains("merge") {
            ListMerge::Replace
        } else if let Some(keys) = property
            .get("x-kubernetes-list-map-keys")
            .filter(|k| k.is_array())
        {
            ListMerge::ByKeys(Keys::Custom(keys))
        } else if let Some(key) = property
            .get("x-kubernetes-patch-merge-key")
            .filter(|k| k.is_string())
        {
            ListMerge::ByKeys(Keys::Custom(key))
        } else {
            ListMerge::Primitive
        };
        let property = self.resolve(property);
        // A list's elements have the type of its items; strategies sit on the list itself.
        let typed = property
            .get("items")
            .map_or(property, |items| self.resolve(items));
        (SchemaType::Custom(self, typed), merge)
    }

    /// Follows `$ref: #/definitions/<name>` links.
    fn resolve<'s>(&'s self, mut node: &'s Value) -> &'s Value {
        for _ in 0..MAX_REF_DEPTH {
            let target = node
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/definitions/"))
                .and_then(|name| self.definitions.get(name));
            match target {
                Some(next) => node = next,
                None => break,
            }
        }
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r##"
definitions:
  v1.Pipeline:
    x-kubernetes-group-version-kind: [{group: ci.example.com, version: v1, kind: Pipeline}]
    properties:
      spec: {$ref: "#/definitions/v1.Spec"}
  v1.Spec:
    properties:
      stages:
        items: {$ref: "#/definitions/v1.Stage"}
        x-kubernetes-patch-merge-key: name
        x-kubernetes-patch-strategy: merge
      triggers:
        x-kubernetes-list-map-keys: [branch, event]
        x-kubernetes-patch-merge-key: branch
        x-kubernetes-patch-strategy: merge
      notify:
        x-kubernetes-list-map-keys: [provider]
      labels:
        x-kubernetes-patch-strategy: merge
  v1.Stage:
    properties:
      env:
        x-kubernetes-patch-merge-key: name
        x-kubernetes-patch-strategy: merge,retainKeys
"##;

    fn keys(merge: ListMerge<'_>) -> Option<Vec<&str>> {
        match merge {
            ListMerge::ByKeys(keys) => Some(keys.names()),
            _ => None,
        }
    }

    #[test]
    fn merge_keys_follow_refs_and_list_map_keys_win() {
        let schema = CustomSchema::parse(SCHEMA, "schema.yaml").unwrap();
        let root = schema.root_type("ci.example.com", "v1", "Pipeline");
        let SchemaType::Custom(_, root) = root else {
            panic!("kind not found");
        };
        let (spec, _) = schema.field(root, "spec");
        let SchemaType::Custom(_, spec) = spec else {
            panic!("spec not typed");
        };
        let (stage, stages) = schema.field(spec, "stages");
        assert_eq!(keys(stages), Some(vec!["name"]));
        let SchemaType::Custom(_, stage) = stage else {
            panic!("items not typed");
        };
        assert_eq!(keys(schema.field(stage, "env").1), Some(vec!["name"]));
        assert_eq!(
            keys(schema.field(spec, "triggers").1),
            Some(vec!["branch", "event"])
        );
        // List-map keys without a patch strategy do not merge.
        assert_eq!(schema.field(spec, "notify").1, ListMerge::Replace);
        assert_eq!(schema.field(spec, "labels").1, ListMerge::Primitive);
        assert_eq!(schema.field(spec, "missing").1, ListMerge::Replace);
    }

    #[test]
    fn kinds_not_in_the_schema_are_unknown_and_a_schema_needs_definitions() {
        let schema = CustomSchema::parse(SCHEMA, "schema.yaml").unwrap();
        assert_eq!(schema.root_type("apps", "v1", "Deployment"), SchemaType::Unknown);
        assert_eq!(
            schema.root_type("ci.example.com", "v2", "Pipeline"),
            SchemaType::Unknown
        );
        let err = CustomSchema::parse("{\"swagger\": \"2.0\"}", "s.json").unwrap_err();
        assert!(err.contains("no 'definitions' map"), "{err}");
    }
}
