//! Secret hygiene: base64 for `stringData` folding, and masking of values in diffs and errors.

use serde_json::Value;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as the API server stores Secret `data`.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64; `None` when it is not valid base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|a| *a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
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
                    values.push(base64_encode(value.as_bytes()));
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
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
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
