//! The file formats sops writes: YAML, JSON, dotenv, INI and binary (a JSON envelope whose
//! `data` holds the file). Each loads into a body tree and the `sops` metadata tree, and the
//! decrypted body is written back in the same format.

use std::collections::BTreeMap;

use super::SopsError;
use super::tree::Node;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Dotenv,
    Ini,
    Binary,
}

impl Format {
    /// The format sops infers from a file name.
    pub(crate) fn for_path(path: &str) -> Format {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".yaml") || lower.ends_with(".yml") {
            Format::Yaml
        } else if lower.ends_with(".json") || lower.ends_with(".dockerconfigjson") {
            Format::Json
        } else if lower.ends_with(".env") {
            Format::Dotenv
        } else if lower.ends_with(".ini") {
            Format::Ini
        } else {
            Format::Binary
        }
    }

    /// The text an encrypted file of this format always contains.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Format::Yaml => "mac: ENC[",
            Format::Json | Format::Binary => "\"mac\": \"ENC[",
            Format::Dotenv => "sops_mac=ENC[",
            Format::Ini => "[sops]",
        }
    }

    /// The format of an encrypted blob, told by its marker.
    pub(crate) fn detect(bytes: &[u8]) -> Option<Format> {
        let text = String::from_utf8_lossy(bytes);
        [Format::Json, Format::Yaml, Format::Dotenv, Format::Ini]
            .into_iter()
            .find(|f| text.contains(f.marker()))
    }

    fn name(self) -> &'static str {
        match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
            Format::Dotenv => "dotenv",
            Format::Ini => "INI",
            Format::Binary => "binary",
        }
    }
}

fn load_error(format: Format, reason: impl std::fmt::Display) -> SopsError {
    SopsError::Load {
        format: format.name(),
        reason: reason.to_string(),
    }
}

/// Splits an encrypted file into its body and its metadata.
pub(crate) fn load(bytes: &[u8], format: Format) -> Result<(Node, Node), SopsError> {
    let text = std::str::from_utf8(bytes).map_err(|e| load_error(format, e))?;
    let body = match format {
        // JSON is read as YAML: the YAML reader keeps the key order the MAC was taken in.
        Format::Yaml | Format::Json | Format::Binary => {
            let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| load_error(format, e))?;
            from_yaml(value)
        }
        Format::Dotenv => load_dotenv(text)?,
        Format::Ini => load_ini(text)?,
    };
    let Node::Map(mut entries) = body else {
        return Err(load_error(format, "the document is not a mapping"));
    };
    let metadata = match format {
        Format::Dotenv => unflatten(take_prefixed(&mut entries, "sops_")),
        Format::Ini => match take(&mut entries, "sops") {
            Some(Node::Map(flat)) => unflatten(flat),
            _ => Node::Null,
        },
        _ => take(&mut entries, "sops").unwrap_or(Node::Null),
    };
    if !matches!(metadata, Node::Map(_)) {
        return Err(SopsError::Metadata("sops metadata not found".into()));
    }
    Ok((Node::Map(entries), metadata))
}

/// The decrypted body as a file of `format`.
pub(crate) fn emit(body: Node, format: Format) -> Result<Vec<u8>, SopsError> {
    let emit_error = |reason: String| SopsError::Emit {
        format: format.name(),
        reason,
    };
    match format {
        Format::Yaml => serde_yaml::to_string(&to_yaml(body))
            .map(String::into_bytes)
            .map_err(|e| emit_error(e.to_string())),
        Format::Json => {
            let mut out =
                serde_json::to_string_pretty(&to_yaml(body)).map_err(|e| emit_error(e.to_string()))?;
            out.push('\n');
            Ok(out.into_bytes())
        }
        Format::Binary => match take_map(body, "data") {
            Some(Node::Str(data)) => Ok(data.into_bytes()),
            _ => Err(emit_error("no string 'data' in the binary envelope".into())),
        },
        Format::Dotenv => {
            let mut out = String::new();
            for (key, value) in entries(body) {
                out.push_str(&format!("{key}={}\n", scalar(&value).replace('\n', "\\n")));
            }
            Ok(out.into_bytes())
        }
        Format::Ini => {
            let mut out = String::new();
            for (section, values) in entries(body) {
                let values = entries(values);
                if section == "DEFAULT" && values.is_empty() {
                    continue;
                }
                out.push_str(&format!("[{section}]\n"));
                for (key, value) in values {
                    out.push_str(&format!("{key} = {}\n", scalar(&value)));
                }
                out.push('\n');
            }
            Ok(out.into_bytes())
        }
    }
}

fn entries(node: Node) -> Vec<(String, Node)> {
    match node {
        Node::Map(entries) => entries,
        _ => Vec::new(),
    }
}

fn take(entries: &mut Vec<(String, Node)>, key: &str) -> Option<Node> {
    let at = entries.iter().position(|(k, _)| k == key)?;
    Some(entries.remove(at).1)
}

fn take_map(node: Node, key: &str) -> Option<Node> {
    take(&mut entries(node), key)
}

fn take_prefixed(entries: &mut Vec<(String, Node)>, prefix: &str) -> Vec<(String, Node)> {
    let (meta, rest): (Vec<_>, Vec<_>) = std::mem::take(entries)
        .into_iter()
        .partition(|(k, _)| k.starts_with(prefix));
    *entries = rest;
    meta.into_iter()
        .map(|(k, v)| (k[prefix.len()..].to_string(), v))
        .collect()
}

fn scalar(node: &Node) -> String {
    match node {
        Node::Str(s) => s.clone(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => f.to_string(),
        Node::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

fn load_dotenv(text: &str) -> Result<Node, SopsError> {
    let mut entries = Vec::new();
    for line in text.split('\n').filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| load_error(Format::Dotenv, "a line without '='"))?;
        entries.push((key.to_string(), Node::Str(value.replace("\\n", "\n"))));
    }
    Ok(Node::Map(entries))
}

/// INI sections of `key = value` lines; newlines in the metadata are written as `\n`.
fn load_ini(text: &str) -> Result<Node, SopsError> {
    let mut sections: Vec<(String, Node)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.trim().to_string(), Node::Map(Vec::new())));
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| load_error(Format::Ini, "a line without '='"))?;
        let Some((section, Node::Map(values))) = sections.last_mut() else {
            return Err(load_error(Format::Ini, "a key outside any section"));
        };
        let mut value = value.trim().to_string();
        if section == "sops" {
            value = value.replace("\\n", "\n");
        }
        values.push((key.trim().to_string(), Node::Str(value)));
    }
    Ok(Node::Map(sections))
}

/// Flat metadata keys (`age__list_0__map_enc`) back into a tree.
fn unflatten(flat: Vec<(String, Node)>) -> Node {
    #[derive(Default)]
    struct Slot {
        value: Option<Node>,
        keys: Vec<(String, Slot)>,
        items: BTreeMap<usize, Slot>,
    }
    fn into_node(slot: Slot) -> Node {
        if let Some(value) = slot.value {
            return value;
        }
        if !slot.items.is_empty() {
            return Node::List(slot.items.into_values().map(into_node).collect());
        }
        Node::Map(slot.keys.into_iter().map(|(k, s)| (k, into_node(s))).collect())
    }
    let mut root = Slot::default();
    for (key, value) in flat {
        let mut slot = &mut root;
        let mut rest = key.as_str();
        let mut first = true;
        while !rest.is_empty() {
            let (token, is_list, tail) = next_token(rest, first);
            first = false;
            rest = tail;
            slot = if is_list {
                slot.items.entry(token.parse().unwrap_or(0)).or_default()
            } else {
                let at = match slot.keys.iter().position(|(k, _)| k == token) {
                    Some(at) => at,
                    None => {
                        slot.keys.push((token.to_string(), Slot::default()));
                        slot.keys.len() - 1
                    }
                };
                &mut slot.keys[at].1
            };
        }
        slot.value = Some(value);
    }
    into_node(root)
}

/// The next token of a flat key: its text, whether it is a list index, and the rest.
fn next_token(rest: &str, first: bool) -> (&str, bool, &str) {
    const MAP: &str = "__map_";
    const LIST: &str = "__list_";
    let (is_list, body) = if let Some(body) = rest.strip_prefix(LIST) {
        (true, body)
    } else if let Some(body) = rest.strip_prefix(MAP) {
        (false, body)
    } else {
        debug_assert!(first || rest.is_empty());
        (false, rest)
    };
    let end = [body.find(MAP), body.find(LIST)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(body.len());
    (&body[..end], is_list, &body[end..])
}

pub(crate) fn from_yaml(value: serde_yaml::Value) -> Node {
    use serde_yaml::Value as Y;
    match value {
        Y::Null => Node::Null,
        Y::Bool(b) => Node::Bool(b),
        Y::Number(n) => match n.as_i64() {
            Some(i) => Node::Int(i),
            None => Node::Float(n.as_f64().unwrap_or_default()),
        },
        Y::String(s) => Node::Str(s),
        Y::Sequence(items) => Node::List(items.into_iter().map(from_yaml).collect()),
        Y::Mapping(map) => Node::Map(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml::to_string(&other)
                            .unwrap_or_default()
                            .trim_end()
                            .to_string(),
                    };
                    (key, from_yaml(v))
                })
                .collect(),
        ),
        Y::Tagged(tagged) => from_yaml(tagged.value),
    }
}

pub(crate) fn to_yaml(node: Node) -> serde_yaml::Value {
    use serde_yaml::Value as Y;
    match node {
        Node::Null => Y::Null,
        Node::Bool(b) => Y::Bool(b),
        Node::Int(i) => Y::Number(i.into()),
        Node::Float(f) => Y::Number(f.into()),
        Node::Str(s) => Y::String(s),
        Node::List(items) => Y::Sequence(items.into_iter().map(to_yaml).collect()),
        Node::Map(entries) => Y::Mapping(
            entries
                .into_iter()
                .map(|(k, v)| (Y::String(k), to_yaml(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_metadata_becomes_a_tree() {
        let flat = vec![
            (
                "age__list_0__map_recipient".to_string(),
                Node::Str("age1x".into()),
            ),
            ("age__list_0__map_enc".to_string(), Node::Str("E".into())),
            ("mac".to_string(), Node::Str("M".into())),
        ];
        let tree = unflatten(flat);
        let expected = Node::Map(vec![
            (
                "age".into(),
                Node::List(vec![Node::Map(vec![
                    ("recipient".into(), Node::Str("age1x".into())),
                    ("enc".into(), Node::Str("E".into())),
                ])]),
            ),
            ("mac".into(), Node::Str("M".into())),
        ]);
        assert_eq!(tree, expected);
    }

    #[test]
    fn dotenv_round_trips_newlines() {
        let (body, meta) = load(b"A=one\\ntwo\n#c\nsops_mac=ENC[x]\n", Format::Dotenv).unwrap();
        assert_eq!(meta, Node::Map(vec![("mac".into(), Node::Str("ENC[x]".into()))]));
        assert_eq!(emit(body, Format::Dotenv).unwrap(), b"A=one\\ntwo\n");
    }

    #[test]
    fn formats_follow_the_file_name() {
        assert_eq!(Format::for_path("a/b.env"), Format::Dotenv);
        assert_eq!(Format::for_path("x.YML"), Format::Yaml);
        assert_eq!(Format::for_path(".dockerconfigjson"), Format::Json);
        assert_eq!(Format::for_path("key.bin"), Format::Binary);
        assert_eq!(Format::detect(b"[sops]\nmac = ENC["), Some(Format::Ini));
        assert_eq!(Format::detect(b"plain"), None);
    }
}
