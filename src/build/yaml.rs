//! YAML in and out: multi-document parsing with anchors, aliases and merge keys into
//! `serde_json` values, with kustomize's scalar normalization where the parser allows it.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::BuildError;

/// Parses every document of `text` (from file `origin`) into a JSON value. Empty documents
/// are dropped; merge keys (`<<`) are resolved.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, BuildError> {
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let mut value = serde_yaml::Value::deserialize(document).map_err(|e| yaml_error(origin, &e))?;
        value.apply_merge().map_err(|e| yaml_error(origin, &e))?;
        let json = to_json(value);
        if !json.is_null() {
            out.push(json);
        }
    }
    Ok(out)
}

/// Parses one document that must be an object (a kustomization file, a patch).
pub fn parse_object(text: &str, origin: &str) -> Result<Map<String, Value>, BuildError> {
    let mut docs = parse_documents(text, origin)?;
    match docs.len() {
        0 => Ok(Map::new()),
        1 => match docs.remove(0) {
            Value::Object(map) => Ok(map),
            other => Err(BuildError::NotObject { file: origin.to_string(), index: 1, found: kind_of(&other) }),
        },
        n => Err(BuildError::Kustomization { file: origin.to_string(), message: format!("expected one YAML document, found {n}") }),
    }
}

/// Parses a resource file: every document must be an object; `*List` objects are expanded
/// into their items.
pub fn parse_resources(text: &str, origin: &str) -> Result<Vec<Map<String, Value>>, BuildError> {
    let mut out = Vec::new();
    for (i, doc) in parse_documents(text, origin)?.into_iter().enumerate() {
        match doc {
            Value::Object(map) => expand_list(map, origin, i + 1, &mut out)?,
            other => return Err(BuildError::NotObject { file: origin.to_string(), index: i + 1, found: kind_of(&other) }),
        }
    }
    Ok(out)
}

fn expand_list(map: Map<String, Value>, origin: &str, index: usize, out: &mut Vec<Map<String, Value>>) -> Result<(), BuildError> {
    let is_list = map.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List"))
        && matches!(map.get("items"), Some(Value::Array(_)));
    if !is_list {
        out.push(map);
        return Ok(());
    }
    let Some(Value::Array(items)) = map.get("items") else { unreachable!("checked above") };
    for item in items {
        match item {
            Value::Object(m) => expand_list(m.clone(), origin, index, out)?,
            other => return Err(BuildError::NotObject { file: origin.to_string(), index, found: kind_of(other) }),
        }
    }
    Ok(())
}

/// A short name of a value's type, for error messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn yaml_error(origin: &str, e: &serde_yaml::Error) -> BuildError {
    let line = e.location().map(|l| l.line()).unwrap_or(0);
    // serde_yaml appends "at line X column Y"; the line is reported separately.
    let message = e.to_string();
    let message = message.split(" at line ").next().unwrap_or(&message).to_string();
    BuildError::Yaml { file: origin.to_string(), line, message }
}

fn to_json(v: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => number(&n),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Y::Mapping(m) => Value::Object(m.into_iter().map(|(k, v)| (key_string(k), to_json(v))).collect()),
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            let inner = to_json(t.value);
            if tag == "!!str" || tag.ends_with(":str") {
                Value::String(scalar_text(&inner))
            } else {
                inner
            }
        }
    }
}

/// kyaml prints integral floats as integers (`1.0` becomes `1`), so normalize them here.
fn number(n: &serde_yaml::Number) -> Value {
    if let Some(i) = n.as_i64() {
        return Value::from(i);
    }
    if let Some(u) = n.as_u64() {
        return Value::from(u);
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Value::from(f as i64);
    }
    serde_json::Number::from_f64(f).map(Value::Number).unwrap_or_else(|| Value::String(n.to_string()))
}

fn key_string(k: serde_yaml::Value) -> String {
    match to_json(k) {
        Value::String(s) => s,
        other => scalar_text(&other),
    }
}

/// The text of a scalar value (`true`, `12`, `a`); composite values print as JSON.
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Prints objects as YAML documents separated by `---`.
pub fn emit_documents(objects: &[Value]) -> String {
    let mut out = String::new();
    for (i, obj) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml::to_string(obj).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_yaml_names_file_and_line() {
        let err = parse_documents("a: 1\nb: [1, 2\nc: 3\n", "base/deploy.yaml").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("base/deploy.yaml:"), "{msg}");
        assert!(matches!(err, BuildError::Yaml { line, .. } if line >= 2), "{msg}");
    }

    #[test]
    fn non_object_document_is_rejected_with_its_index() {
        let err = parse_resources("kind: A\n---\n- 1\n- 2\n", "res.yaml").unwrap_err();
        assert_eq!(err.to_string(), "res.yaml: document 2 is not an object (found a list)");
    }

    #[test]
    fn anchors_aliases_and_merge_keys_resolve() {
        let docs = parse_documents("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nref: *b\n", "f").unwrap();
        assert_eq!(docs[0]["other"], serde_json::json!({"x": 1, "y": 3}));
        assert_eq!(docs[0]["ref"], serde_json::json!({"x": 1, "y": 2}));
    }

    #[test]
    fn lists_expand_and_empty_documents_drop() {
        let text = "---\n---\napiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n";
        let objs = parse_resources(text, "f").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "B");
    }

    #[test]
    fn integral_floats_become_integers() {
        let docs = parse_documents("a: 1.0\nb: 1.5\n", "f").unwrap();
        assert_eq!(docs[0]["a"], serde_json::json!(1));
        assert_eq!(docs[0]["b"], serde_json::json!(1.5));
    }
}
