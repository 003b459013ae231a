//! Secret hygiene: masking of values in diffs and errors.

use base64::Engine;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD_NO_PAD;
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

/// The Secret values of an object: everything that must never be shown. A `data` value is
/// listed decoded and as written (the decoding may not give back the same text).
fn secret_values(obj: &Value) -> Vec<Vec<u8>> {
    if !is_secret(obj) {
        return Vec::new();
    }
    let mut values = Vec::new();
    for field in ["data", "stringData"] {
        if let Some(map) = obj.get(field).and_then(Value::as_object) {
            for value in map.values().filter_map(Value::as_str) {
                values.push(value.as_bytes().to_vec());
                if field == "data" {
                    values.extend(base64_decode(value));
                }
            }
        }
    }
    values
}

/// Replaces every Secret value of `objects` in `text` with `***`.
pub(crate) fn redact(text: &str, objects: &[&Value]) -> String {
    let values: Vec<Vec<u8>> = objects.iter().flat_map(|o| secret_values(o)).collect();
    mask(text, &values)
}

/// The shortest prefix of a value that is masked where a message cut the value short. Shorter
/// prefixes are common in ordinary text (`https://`, `postgres://` begin many values and many
/// messages), so masking them would hide the message rather than the value; a cut that keeps
/// fewer bytes reveals at most eleven.
const MIN_PREFIX: usize = 12;

/// `text` with every value shown as `***`, in every way an error may spell it: as is, escaped
/// inside a JSON or Go-quoted string (`\"`, `\\`, `\n`, `\u00e9`, `\x01`, ...), in standard
/// base64, and cut short after at least [`MIN_PREFIX`] bytes of any of these. At each place
/// the longest spelling wins, so a value that contains another is masked whole. Values of one
/// or two bytes would mask ordinary text and reveal little, so they stay. The work is bounded
/// by the text's length times the number of values times a small constant: a match is either
/// shorter than `MIN_PREFIX` or skipped over.
pub(crate) fn mask<V: AsRef<[u8]>>(text: &str, values: &[V]) -> String {
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for value in values.iter().map(AsRef::as_ref).filter(|v| v.len() > 2) {
        forms.push(value.to_vec());
        forms.push(STANDARD_NO_PAD.encode(value).into_bytes());
    }
    forms.sort();
    forms.dedup();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < bytes.len() {
        let longest = forms
            .iter()
            .flat_map(|form| {
                [Writing::AsIs, Writing::Escaped].map(|writing| spelled(text, at, form, writing))
            })
            .filter(|&(matched, _, whole)| whole || matched >= MIN_PREFIX)
            .map(|(_, span, _)| span)
            .max()
            .filter(|&span| span > 0);
        match longest {
            Some(span) => {
                out.push_str("***");
                at += span;
            }
            None => {
                let c = text[at..].chars().next().unwrap_or_default();
                out.push(c);
                at += c.len_utf8();
            }
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Writing {
    AsIs,
    /// Inside a quoted string, where a backslash always starts an escape.
    Escaped,
}

/// How much of `value` the text spells from byte `at`: (value bytes matched, text bytes they
/// take, whether that is all of `value`). The span ends on a character boundary.
fn spelled(text: &str, at: usize, value: &[u8], writing: Writing) -> (usize, usize, bool) {
    let bytes = text.as_bytes();
    let (mut t, mut v) = (at, 0);
    let mut decoded = [0u8; 4];
    while v < value.len() && t < bytes.len() {
        if writing == Writing::Escaped && bytes[t] == b'\\' {
            let Some((n, len)) = unescape(&bytes[t..], &mut decoded) else {
                break;
            };
            if !value[v..].starts_with(&decoded[..n]) {
                break;
            }
            v += n;
            t += len;
        } else if bytes[t] == value[v] {
            v += 1;
            t += 1;
        } else {
            break;
        }
    }
    // A byte-wise match can stop inside a character; escapes are ASCII, so backing off byte
    // by byte drops only raw bytes of that character.
    while !text.is_char_boundary(t) {
        t -= 1;
        v -= 1;
    }
    (v, t - at, v == value.len())
}

/// The bytes one escape at the start of `s` stands for, written to `out`: (how many, the
/// escape's length). JSON's and Go's escapes; `None` for anything else.
fn unescape(s: &[u8], out: &mut [u8; 4]) -> Option<(usize, usize)> {
    let hex = |digits: &[u8]| {
        digits
            .iter()
            .try_fold(0u32, |n, d| Some(n * 16 + char::from(*d).to_digit(16)?))
    };
    let simple = match *s.get(1)? {
        b @ (b'"' | b'\\' | b'/' | b'\'') => b,
        b'n' => b'\n',
        b't' => b'\t',
        b'r' => b'\r',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'v' => 0x0b,
        b'a' => 0x07,
        b'x' => {
            out[0] = u8::try_from(hex(s.get(2..4)?)?).ok()?;
            return Some((1, 4));
        }
        b'u' | b'U' => {
            let len = if s[1] == b'u' { 6 } else { 10 };
            let c = char::from_u32(hex(s.get(2..len)?)?)?;
            return Some((c.encode_utf8(out).len(), len));
        }
        _ => return None,
    };
    out[0] = simple;
    Some((1, 2))
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
    use base64::engine::general_purpose::STANDARD;
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
    fn masking_replaces_the_longest_value_first() {
        let secrets = ["abc", "abcdef", "ab"];
        assert_eq!(mask("x abcdef y abc ab", &secrets), "x *** y *** ab");
    }

    // Before, only the exact bytes were masked: each of these messages showed the value.
    #[test]
    fn masks_values_escaped_in_quoted_strings() {
        let value = "pa\"ss\\word\nline2\u{1}é";
        let table = [
            // JSON (serde_json::to_string, as an API server's JSON echo would write it)
            (serde_json::to_string(value).unwrap(), "\"***\""),
            // Go's %q: control characters as \x, printable non-ASCII as is
            (r#""pa\"ss\\word\nline2\x01é""#.to_string(), "\"***\""),
            // Go's JSON with every non-ASCII character escaped
            (r#""pa\"ss\\word\nline2\u0001\u00e9""#.to_string(), "\"***\""),
        ];
        for (written, want) in table {
            let text = format!("Invalid value: {written}: bad");
            assert_eq!(
                mask(&text, &[value]),
                format!("Invalid value: {want}: bad"),
                "{written}"
            );
        }
        // the escapes stand for what they say: an escape of something else is not the value
        assert_eq!(mask(r"abc\ndef", &["abc\tdef"]), r"abc\ndef");
    }

    #[test]
    fn masks_values_in_base64() {
        // RFC 4648's vectors: "foob" is "Zm9vYg==", "foobar" is "Zm9vYmFy"
        assert_eq!(mask("data: Zm9vYg==", &["foob"]), "data: ***==");
        assert_eq!(mask("data: Zm9vYmFy.", &["foobar"]), "data: ***.");
        // binary values too (Secret data that is not UTF-8)
        assert_eq!(mask("x /wD+ y", &[[0xffu8, 0x00, 0xfe]]), "x *** y");
    }

    #[test]
    fn masks_values_cut_short_from_twelve_bytes() {
        let value = "correct-horse-battery-staple";
        assert_eq!(
            mask("value \"correct-hors...\" too long", &[value]),
            "value \"***...\" too long"
        );
        assert_eq!(mask("value \"correct-hor\"", &[value]), "value \"correct-hor\"");
        // the cut may fall inside an escape's spelling or the base64 form
        let quoted = "line1\nline2\nline3";
        assert_eq!(mask(r#"got "line1\nline2\nl"#, &[quoted]), r#"got "***"#);
        let encoded = STANDARD.encode(value); // Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5LXN0YXBsZQ==
        assert_eq!(mask(&format!("{}...", &encoded[..16]), &[value]), "***...");
        // a cut inside a multi-byte character keeps the text whole
        assert_eq!(mask("0123456789ab€", &["0123456789ab☃"]), "***€");
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
