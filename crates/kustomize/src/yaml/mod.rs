//! YAML in and out: multi-document parsing with anchors, aliases and merge keys into
//! `serde_json` values, with kyaml's scalar resolution.

use std::cell::{Cell, RefCell};

use serde::Deserializer as _;
use serde_json::{Map, Value};

use super::error::BuildError;

mod flow_depth;

/// How many nodes a file may produce beyond its own length in bytes. Without aliases a
/// file cannot produce more nodes than it has bytes, so the excess is what aliases
/// expanded: this bounds a "billion laughs" file (a 90 KB file can otherwise expand to
/// 10^8 nodes) while leaving every ordinary use of anchors far below it.
const ALIAS_NODE_BUDGET: usize = 100_000;

/// Parses every document of `text` (from file `origin`) into a JSON value. Empty documents
/// are dropped; aliases are expanded and merge keys (`<<`) resolved; plain scalars are
/// resolved as kyaml (goyaml v3) does, which differs from YAML 1.2 core in a few places
/// (`0755` is octal, `1_000` is an integer, a plain date becomes a timestamp string).
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, BuildError> {
    collect_documents(text, origin, false)
}

/// Like [`parse_documents`], with YAML 1.1 booleans (`yes`, `on`, `n`, ...) as goyaml v2
/// reads them: kustomize decodes JSON6902 patches that way (sigs.k8s.io/yaml).
pub fn parse_documents_yaml11(text: &str, origin: &str) -> Result<Vec<Value>, BuildError> {
    collect_documents(text, origin, true)
}

fn collect_documents(text: &str, origin: &str, yaml11: bool) -> Result<Vec<Value>, BuildError> {
    let mut out = Vec::new();
    for_each_document(text, origin, yaml11, |_, doc, _| {
        out.push(doc);
        Ok(())
    })?;
    Ok(out)
}

/// Calls `each` with the 1-based index and value of every non-empty document as soon as it
/// is parsed, so a caller never needs a big file's documents all at once.
fn for_each_document(
    text: &str,
    origin: &str,
    yaml11: bool,
    mut each: impl FnMut(usize, Value, Vec<NullPath>) -> Result<(), BuildError>,
) -> Result<(), BuildError> {
    // goyaml (kyaml) reads YAML 1.1 only and refuses other version directives.
    for (n, line) in text.lines().enumerate() {
        if let Some(version) = line.strip_prefix("%YAML")
            && version.trim() != "1.1"
        {
            return Err(BuildError::Yaml {
                file: origin.to_string(),
                line: n + 1,
                message: "found incompatible YAML document".into(),
            });
        }
    }
    flow_depth::refuse_deep_flow(text, origin)?;
    let mut index = 0;
    let folded = super::folded::folded_starts(text);
    let nodes = NodeBudget {
        left: Cell::new(text.len().saturating_add(ALIAS_NODE_BUDGET)),
    };
    let last_str_end = Cell::new(None);
    let nulls = RefCell::new(Vec::new());
    for document in serde_yaml::Deserializer::from_str(text) {
        let mut json = document
            .deserialize_any(Scalars {
                text,
                yaml11,
                nodes: &nodes,
                last_str_end: &last_str_end,
                nulls: &nulls,
            })
            .map_err(|e| yaml_error(origin, &e))?;
        super::folded::apply(&mut json, &folded);
        let mut paths = nulls.take();
        for path in &mut paths {
            path.reverse();
        }
        if !json.is_null() {
            index += 1;
            each(index, json, paths)?;
        }
    }
    Ok(())
}

/// Parses one document that must be an object (a kustomization file), with YAML 1.1
/// booleans.
pub fn parse_object_yaml11(text: &str, origin: &str) -> Result<Map<String, Value>, BuildError> {
    let mut docs = parse_documents_yaml11(text, origin)?;
    match docs.len() {
        0 => Ok(Map::new()),
        1 => match docs.remove(0) {
            Value::Object(map) => Ok(map),
            other => Err(BuildError::NotObject {
                file: origin.to_string(),
                index: 1,
                found: kind_of(&other),
            }),
        },
        n => Err(BuildError::Kustomization {
            file: origin.to_string(),
            message: format!("expected one YAML document, found {n}"),
        }),
    }
}

/// Parses a resource file: every document must be an object; `*List` objects are expanded
/// into their items, which kustomize places after the file's other documents. Each object
/// goes through `keep` as soon as it is parsed (the engine packs it there).
pub fn parse_resources<T>(
    text: &str,
    origin: &str,
    mut keep: impl FnMut(Map<String, Value>) -> Result<T, BuildError>,
) -> Result<Vec<T>, BuildError> {
    parse_resources_with_nulls(text, origin, |obj, _| keep(obj))
}

/// Like [`parse_resources`]; `keep` also gets the paths of the object's implicit nulls
/// (none for the items of a `List`).
pub(crate) fn parse_resources_with_nulls<T>(
    text: &str,
    origin: &str,
    mut keep: impl FnMut(Map<String, Value>, Vec<NullPath>) -> Result<T, BuildError>,
) -> Result<Vec<T>, BuildError> {
    let mut out = Vec::new();
    let mut items = Vec::new();
    for_each_document(text, origin, false, |index, doc, nulls| match doc {
        Value::Object(map) if is_list(&map) => {
            expand_list(map, origin, index, &mut |obj| keep(obj, Vec::new()), &mut items)
        }
        Value::Object(map) => {
            out.push(keep(map, nulls)?);
            Ok(())
        }
        other => Err(BuildError::NotObject {
            file: origin.to_string(),
            index,
            found: kind_of(&other),
        }),
    })?;
    out.append(&mut items);
    Ok(out)
}

fn is_list(map: &Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && matches!(map.get("items"), Some(Value::Array(_)))
}

fn expand_list<T>(
    mut map: Map<String, Value>,
    origin: &str,
    index: usize,
    keep: &mut impl FnMut(Map<String, Value>) -> Result<T, BuildError>,
    out: &mut Vec<T>,
) -> Result<(), BuildError> {
    if !is_list(&map) {
        out.push(keep(map)?);
        return Ok(());
    }
    let Some(Value::Array(items)) = map.remove("items") else {
        unreachable!("checked above")
    };
    for item in items {
        match item {
            Value::Object(m) => expand_list(m, origin, index, keep, out)?,
            other => {
                return Err(BuildError::NotObject {
                    file: origin.to_string(),
                    index,
                    found: kind_of(&other),
                });
            }
        }
    }
    Ok(())
}

/// A short name of a value's type, for error messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
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
    BuildError::Yaml {
        file: origin.to_string(),
        line,
        message,
    }
}

/// A serde visitor building JSON values. serde_yaml hands plain and quoted scalars that
/// need no unescaping to `visit_borrowed_str` as slices of the input; the byte before the
/// slice tells a quoted scalar (`'`/`"`) from a plain one, which is then resolved the way
/// goyaml v3 does.
#[derive(Clone, Copy)]
struct Scalars<'t> {
    text: &'t str,
    yaml11: bool,
    nodes: &'t NodeBudget,
    /// Where in `text` the last scalar handed over as a slice ended: after a map key, it
    /// tells what follows the key's `:`.
    last_str_end: &'t Cell<Option<usize>>,
    /// Implicit nulls (`key:` with nothing after it) seen so far, each path leaf first:
    /// a map or list being built appends its own step to those its children left.
    nulls: &'t RefCell<Vec<NullPath>>,
}

/// How kyaml reads a map value written as nothing.
enum EmptyValue {
    /// `key:` at the end of a line: an implicit null.
    Null,
    /// `{key: }` or `{key: , other: x}` in a flow mapping: the empty string.
    EmptyString,
}

/// One step of a path inside a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Key(String),
    Index(usize),
}

/// Where an implicit null sits in a document: a map value written as nothing at all
/// (`key:`), which kyaml keeps apart from a written `null` or `~` (a strategic merge drops
/// the first and keeps the second).
pub(crate) type NullPath = Vec<Step>;

/// The nodes a file may still produce, spent as they are built so that an expansion stops
/// before it takes the memory.
struct NodeBudget {
    left: Cell<usize>,
}

impl NodeBudget {
    fn spend<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "aliases expand to more than {ALIAS_NODE_BUDGET} nodes beyond the file's size"
            ))),
        }
    }
}

impl Scalars<'_> {
    /// The offset in `text` just past `s`, when `s` is a slice of it.
    fn end_in_text(&self, s: &str) -> Option<usize> {
        let base = self.text.as_ptr() as usize;
        let start = (s.as_ptr() as usize).checked_sub(base)?;
        (start + s.len() <= self.text.len()).then_some(start + s.len())
    }

    /// What follows the `:` of a map key that ends at `key_end` (after the key's closing
    /// quote, if any), when the value is written as nothing.
    fn empty_value_after(&self, key_end: usize) -> Option<EmptyValue> {
        let rest = self.text[key_end..].trim_start_matches(['"', '\'']);
        let rest = rest.trim_start_matches([' ', '\t']).strip_prefix(':')?;
        match rest.trim_start_matches([' ', '\t']).chars().next() {
            None | Some('\n' | '\r' | '#') => Some(EmptyValue::Null),
            Some(',' | '}') => Some(EmptyValue::EmptyString),
            Some(_) => None,
        }
    }

    fn is_plain(&self, s: &str) -> bool {
        let base = self.text.as_ptr() as usize;
        let start = s.as_ptr() as usize;
        if start < base || start > base + self.text.len() {
            return false;
        }
        let before = self.text[..start - base].trim_end_matches([' ', '\t']);
        !(before.ends_with('\'') || before.ends_with('"') || before.ends_with("!!str"))
    }
}

impl<'de> serde::de::Visitor<'de> for Scalars<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    // serde_yaml hands decimal integers beyond 64 bits over as 128-bit ones; goyaml v3 reads
    // them as floats.
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        self.visit_f64(v as f64)
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        self.visit_f64(v as f64)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        if !v.is_finite() {
            return Err(E::custom(format!(
                "unsupported value: {v} (JSON has no infinity or NaN)"
            )));
        }
        Ok(float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value, E> {
        self.last_str_end.set(self.end_in_text(v));
        if self.is_plain(v) {
            if self.yaml11 {
                match v {
                    "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Ok(Value::Bool(true)),
                    "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Ok(Value::Bool(false)),
                    _ => {}
                }
            }
            return Ok(resolve_plain(v));
        }
        Ok(Value::String(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        let mut from = self.nulls.borrow().len();
        while let Some(v) = seq.next_element_seed(self)? {
            for path in &mut self.nulls.borrow_mut()[from..] {
                path.push(Step::Index(items.len()));
            }
            from = self.nulls.borrow().len();
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        let mut merged: Vec<Map<String, Value>> = Vec::new();
        let mut from = self.nulls.borrow().len();
        loop {
            self.last_str_end.set(None);
            let Some(key) = access.next_key_seed(self)? else {
                break;
            };
            let key_end = self.last_str_end.get();
            self.nulls.borrow_mut().truncate(from);
            let mut value = access.next_value_seed(self)?;
            let empty = match (&value, key_end) {
                (Value::Null, Some(end)) => self.empty_value_after(end),
                _ => None,
            };
            if matches!(empty, Some(EmptyValue::EmptyString)) {
                value = Value::String(String::new());
            }
            let key = match key {
                Value::String(s) => s,
                // As goyaml refuses them. Printed as JSON, nested ones doubled their escapes at
                // every level: `{{{...{a}...}}}` 25 deep took seconds and gigabytes.
                Value::Object(_) | Value::Array(_) => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid map key: {}",
                        kind_of(&key)
                    )));
                }
                other => scalar_text(&other),
            };
            let mut nulls = self.nulls.borrow_mut();
            if key == "<<" {
                // Nulls merged in from elsewhere are not tracked.
                nulls.truncate(from);
            } else {
                for path in &mut nulls[from..] {
                    path.push(Step::Key(key.clone()));
                }
                if matches!(empty, Some(EmptyValue::Null)) {
                    nulls.push(vec![Step::Key(key.clone())]);
                }
            }
            from = nulls.len();
            drop(nulls);
            if key == "<<" {
                let bad = || serde::de::Error::custom("merge key '<<' needs a map or a list of maps");
                match value {
                    Value::Object(m) => merged.push(m),
                    Value::Array(items) => {
                        for item in items {
                            match item {
                                Value::Object(m) => merged.push(m),
                                _ => return Err(bad()),
                            }
                        }
                    }
                    _ => return Err(bad()),
                }
                continue;
            }
            if map.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "mapping key \"{key}\" already defined"
                )));
            }
            map.insert(key, value);
        }
        // Explicit keys win over merged ones; among merged maps the first one wins.
        for m in merged {
            for (k, v) in m {
                map.entry(k).or_insert(v);
            }
        }
        Ok(Value::Object(map))
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // A value with a custom tag (`!Tag x`): the tag is dropped, the value kept.
        use serde::de::VariantAccess;
        let (_tag, variant): (String, _) = data.variant()?;
        variant.newtype_variant_seed(self)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Scalars<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.nodes.spend()?;
        d.deserialize_any(self)
    }
}

/// kyaml prints integral floats as integers (`1.0` becomes `1`), so normalize them here.
fn float(f: f64) -> Value {
    if let Some(n) = integral_float(f) {
        return Value::Number(n);
    }
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(f.to_string()))
}

/// The integer an integral float prints as. kustomize's output goes through Go's JSON, which
/// writes a float below 1e21 in full with its shortest digits (6.153255929452609e18 as
/// `6153255929452609000`, not the exact `6153255929452608512`); goyaml v2 reads that text
/// back as an integer when it fits 64 bits, else as a float (`-1e+19`).
pub(crate) fn integral_float(f: f64) -> Option<serde_json::Number> {
    if f.fract() != 0.0 || f.abs() >= 18_446_744_073_709_551_616.0 {
        return None;
    }
    let text = format!("{f}");
    match text.parse::<i64>() {
        Ok(n) => Some(n.into()),
        Err(_) => text.parse::<u64>().ok().map(Into::into),
    }
}

/// Resolves a plain scalar that serde_yaml left as a string, with goyaml v3's extra rules:
/// Go `ParseInt(s, 0, 64)` integers (leading-zero octal, underscores), YAML floats, and
/// dates, which kyaml turns into RFC 3339 timestamps.
pub(crate) fn resolve_plain(s: &str) -> Value {
    let first = s.as_bytes().first().copied().unwrap_or(b' ');
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Value::String(s.to_string());
    }
    let plain = s.replace('_', "");
    let (negative, digits) = match plain.as_bytes().first() {
        Some(b'-') => (true, &plain[1..]),
        Some(b'+') => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    let parsed = if digits.is_empty() || digits.starts_with(['+', '-']) {
        None
    } else if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = digits.strip_prefix("0o").or_else(|| digits.strip_prefix("0O")) {
        i64::from_str_radix(oct, 8).ok()
    } else if let Some(bin) = digits.strip_prefix("0b").or_else(|| digits.strip_prefix("0B")) {
        i64::from_str_radix(bin, 2).ok()
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()
    } else {
        digits.parse::<i64>().ok()
    };
    if let Some(n) = parsed {
        return Value::from(if negative { -n } else { n });
    }
    if is_yaml_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
    {
        return float(f);
    }
    if is_date(s) {
        return Value::String(format!("{s}T00:00:00Z"));
    }
    Value::String(s.to_string())
}

/// goyaml's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// `YYYY-MM-DD` (a YAML timestamp without time).
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && [0, 1, 2, 3, 5, 6, 8, 9].iter().all(|&i| b[i].is_ascii_digit())
}

/// The text of a scalar value (`true`, `12`, `a`); composite values print as JSON.
pub(crate) fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether the plain scalar `s` reads back as this string to a YAML 1.1 reader (goyaml v2,
/// which prints kustomize's output and reads it again after Flux's substitution) and to
/// kyaml. Not: the empty string, `~` and `null`, booleans (`y`, `on`, `yes`, `True`, ...),
/// numbers in every YAML 1.1 spelling (`012`, `0x1F`, `0o17`, `0b101`, `1_000`, `1e3`, `.5`,
/// `+1`, `3.`, `.inf`, `.NaN`), timestamps (`2024-01-01`, `2024-1-1`) and base-60 numbers
/// (`1:20`). Yes: `=`, `<<`, `1,000`, `0x`, `yes please`, which goyaml v2 prints unquoted.
pub(crate) fn reads_back_as_string(s: &str) -> bool {
    // Only a digit, sign or dot can start a number, timestamp or base-60 form.
    let numeric = s.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.'));
    !s.is_empty()
        && !matches!(
            s,
            "~" | "null"
                | "Null"
                | "NULL"
                | "y"
                | "Y"
                | "yes"
                | "Yes"
                | "YES"
                | "n"
                | "N"
                | "no"
                | "No"
                | "NO"
                | "true"
                | "True"
                | "TRUE"
                | "false"
                | "False"
                | "FALSE"
                | "on"
                | "On"
                | "ON"
                | "off"
                | "Off"
                | "OFF"
                | ".inf"
                | ".Inf"
                | ".INF"
                | "+.inf"
                | "+.Inf"
                | "+.INF"
                | "-.inf"
                | "-.Inf"
                | "-.INF"
                | ".nan"
                | ".NaN"
                | ".NAN"
        )
        && (!numeric || (resolve_plain(s).as_str() == Some(s) && !super::yaml11::reads_as_other(s)))
}

#[cfg(test)]
mod tests;
