//! Secret hygiene: masking of values in diffs and errors.

use base64::Engine;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::Value;

/// Standard base64 read as leniently as the masking needs: padding may be missing and bits
/// after the last byte are ignored.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes standard base64; `None` when it is not valid base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    LENIENT.decode(text.trim_end_matches('=')).ok()
}

/// True for core `v1` Secrets.
pub(crate) fn is_secret(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// The Secret values of an object, raw and base64-encoded, longest first: everything that must
/// never be shown.
fn secret_values(obj: &Value) -> Vec<String> {
    if !is_secret(obj) {
        return Vec::new();
    }
    let mut values = Vec::new();
    for field in ["data", "stringData"] {
        if let Some(map) = obj.get(field).and_then(Value::as_object) {
            for value in map.values().filter_map(Value::as_str) {
                values.push(value.to_string());
                if field == "data" {
                    if let Some(raw) = base64_decode(value).and_then(|b| String::from_utf8(b).ok()) {
                        values.push(raw);
                    }
                } else {
                    values.push(STANDARD.encode(value.as_bytes()));
                }
            }
        }
    }
    values.retain(|v| !v.is_empty());
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    values
}

/// Replaces every Secret value of `objects` in `text` with `***`.
pub(crate) fn redact(text: &str, objects: &[&Value]) -> String {
    let mut out = text.to_string();
    for obj in objects {
        for value in secret_values(obj) {
            out = out.replace(&value, "***");
        }
    }
    out
}

/// Masks Secret data of `before` and `after` for display: `***` where equal, `*** (before)` /
/// `*** (after)` where the value changed (Flux's `Diff` format).
pub(crate) fn mask_pair(before: &mut Value, after: &mut Value) {
    if !is_secret(before) && !is_secret(after) {
        return;
    }
    for field in ["data", "stringData"] {
        let old = before.get(field).cloned().unwrap_or(Value::Null);
        let new = after.get(field).cloned().unwrap_or(Value::Null);
        if let Some(map) = before.get_mut(field).and_then(Value::as_object_mut) {
            for (key, value) in map.iter_mut() {
                *value = Value::from(if new.get(key) == Some(value) {
                    "***"
                } else {
                    "*** (before)"
                });
            }
        }
        if let Some(map) = after.get_mut(field).and_then(Value::as_object_mut) {
            for (key, value) in map.iter_mut() {
                *value = Value::from(if old.get(key) == Some(value) {
                    "***"
                } else {
                    "*** (after)"
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The standard base64 test vectors: every prefix of "foobar", padded with `=`.
    #[test]
    fn base64_matches_the_standard_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(STANDARD.encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
        }
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn redacts_raw_and_encoded_values() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "aHVudGVyMg=="}, "stringData": {"b": "s3cr3t"}});
        let text = "Invalid value: \"hunter2\" and aHVudGVyMg== and s3cr3t and czNjcjN0";
        assert_eq!(
            redact(text, &[&secret]),
            "Invalid value: \"***\" and *** and *** and ***"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "visible"}});
        assert_eq!(redact("visible", &[&cm]), "visible");
    }

    #[test]
    fn masks_equal_and_changed_values_differently() {
        let mut before = json!({"apiVersion": "v1", "kind": "Secret", "data": {"same": "YQ==", "changed": "Yg==", "gone": "Yw=="}});
        let mut after = json!({"apiVersion": "v1", "kind": "Secret", "data": {"same": "YQ==", "changed": "ZA==", "new": "ZQ=="}});
        mask_pair(&mut before, &mut after);
        assert_eq!(
            before["data"],
            json!({"same": "***", "changed": "*** (before)", "gone": "*** (before)"})
        );
        assert_eq!(
            after["data"],
            json!({"same": "***", "changed": "*** (after)", "new": "*** (after)"})
        );
    }
}
