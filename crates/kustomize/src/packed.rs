//! Objects held as compact JSON text between build steps.
//!
//! A build holds every object of every overlay at once. Parsed into `serde_json::Value`,
//! each map is a B-tree node of about 600 bytes, so a small Deployment costs about 7 KB;
//! as compact JSON it costs its text, about 0.5 KB. Steps open one object at a time and
//! pack it again when done, so memory follows the size of the text, not of the parse.

use serde_json::{Map, Value};

/// One object as compact JSON text. Two packed objects are equal exactly when their values
/// are, because maps serialize in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed(Box<str>);

impl Packed {
    /// Packs a value.
    pub fn new(value: &Value) -> Self {
        Packed(value.to_string().into_boxed_str())
    }

    /// Packs an object.
    pub(crate) fn from_map(object: &Map<String, Value>) -> Self {
        Packed(
            serde_json::to_string(object)
                .expect("a map with string keys serializes")
                .into_boxed_str(),
        )
    }

    /// Whether the compact text contains `needle`: a cheap test before parsing.
    pub(crate) fn contains(&self, needle: &str) -> bool {
        self.0.contains(needle)
    }

    /// Whether some `"annotations"` map in the text holds a value other than a string: a
    /// cheap test before parsing (it looks at every such map, not only the top-level one).
    pub(crate) fn has_non_string_annotation(&self) -> bool {
        const OPEN: &str = r#""annotations":{"#;
        let text = &*self.0;
        let mut from = 0;
        while let Some(at) = text[from..].find(OPEN) {
            let mut rest = &text[from + at + OPEN.len()..];
            // Compact JSON: `"key":"value"` pairs separated by `,` up to `}`.
            while let Some(after_key) = skip_string(rest).and_then(|r| r.strip_prefix(':')) {
                let Some(after_value) = skip_string(after_key) else {
                    return true;
                };
                match after_value.strip_prefix(',') {
                    Some(next) => rest = next,
                    None => break,
                }
            }
            from += at + OPEN.len();
        }
        false
    }

    /// The value, parsed again.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).expect("packed text is JSON this module wrote")
    }

    /// The object, parsed again; an empty map when the packed value is not an object.
    pub(crate) fn to_map(&self) -> Map<String, Value> {
        match self.to_value() {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

/// The text after the JSON string `text` starts with, or None when it starts with none.
fn skip_string(text: &str) -> Option<&str> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '"' => return Some(&text[i + 2..]),
            _ => {}
        }
    }
    None
}

/// Every object parsed, for a caller that needs them all at once (the applier).
pub fn values(objects: &[Packed]) -> Vec<Value> {
    objects.iter().map(Packed::to_value).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn packing_keeps_every_kind_of_value() {
        let value = json!({
            "kind": "ConfigMap",
            "data": {"quoted": "0755", "empty": ""},
            "n": [1, -2, 3.5, 1.0, 18446744073709551615u64],
            "flags": [true, false, null],
            "nested": {"a": {"b": [{"c": {}}, []]}},
        });
        let packed = Packed::new(&value);
        assert_eq!(packed.to_value(), value);
        // A float that happens to be whole stays a float.
        assert!(packed.to_value()["n"][3].is_f64());
        assert_eq!(Packed::from_map(value.as_object().unwrap()), packed);
    }

    #[test]
    fn packed_text_is_compact_json() {
        let value = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(
            &*Packed::new(&value).0,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#
        );
    }

    #[test]
    fn non_string_annotations_are_spotted_in_the_text() {
        let spotted = |v: Value| Packed::new(&v).has_non_string_annotation();
        assert!(!spotted(
            json!({"metadata": {"annotations": {"a": "x\\\"y", "b": ""}}})
        ));
        assert!(!spotted(
            json!({"metadata": {"name": "n"}, "data": {"annotations": 1}})
        ));
        assert!(spotted(json!({"metadata": {"annotations": {"a": "x", "b": 1}}})));
        assert!(spotted(json!({"metadata": {"annotations": {"a\\\"": null}}})));
        assert!(spotted(
            json!({"spec": {"template": {"metadata": {"annotations": {"a": true}}}}})
        ));
    }
}
