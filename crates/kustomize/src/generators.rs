//! configMapGenerator / secretGenerator: key/value sources (envs, literals, files),
//! behavior create/merge/replace, generatorOptions, and the content-hash name suffix.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::error::BuildError;
use super::file::{GeneratorArgs, GeneratorOptions};
use super::loader::Loader;
use super::resmap::{Generated, Origin, ResId, ResMap, Resource};

/// ConfigMap or Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GenKind {
    ConfigMap,
    Secret,
}

impl GenKind {
    fn name(self) -> &'static str {
        match self {
            GenKind::ConfigMap => "ConfigMap",
            GenKind::Secret => "Secret",
        }
    }
}

/// What a generator does with an object of the same id from earlier.
#[derive(Clone, Copy)]
enum Behavior {
    Create,
    Merge,
    Replace,
}

/// Where generator sources are read from.
pub(crate) struct Context<'a> {
    pub(crate) loader: &'a Loader,
    /// Directory of the kustomization (canonical).
    pub(crate) dir: &'a Path,
    /// The kustomization file, for messages.
    pub(crate) file: &'a Path,
}

/// Runs one generator entry against the accumulated map.
pub(crate) fn run(
    ctx: &Context<'_>,
    map: &mut ResMap,
    kind: GenKind,
    args: &GeneratorArgs,
    global: Option<&GeneratorOptions>,
) -> Result<(), BuildError> {
    let file = ctx.loader.show(ctx.file);
    let gen_err = |message: String| BuildError::Generator {
        file: file.clone(),
        name: args.name.clone(),
        message,
    };
    if args.name.is_empty() {
        return Err(gen_err("a generator needs a name".into()));
    }
    let options = merge_options(args.options.as_ref(), global);
    let pairs = load_pairs(ctx, args).map_err(|e| match e {
        PairError::Build(b) => b,
        PairError::Message(m) => gen_err(m),
    })?;
    let obj = make_object(kind, args, &options, &pairs);
    let id = ResId::of(&obj);
    let hash_suffix = !options.disable_name_suffix_hash.unwrap_or(false);
    let existing = map.resources.iter().position(|r| r.any_id(|i| i.same_as(&id)));
    // kustomize reads any other word (`add`, `Create`) as "unspecified", which creates.
    let behavior = match args.behavior.as_str() {
        "merge" => Behavior::Merge,
        "replace" => Behavior::Replace,
        "" | "create" => Behavior::Create,
        other => {
            map.warnings.push(format!(
                "{file}: generator '{}' has unknown behavior '{other}'; it creates, as in kustomize",
                args.name
            ));
            Behavior::Create
        }
    };
    match (behavior, existing) {
        (Behavior::Create, None) => {
            let mut res = Resource::new(obj);
            res.generated = Some(Generated { hash_suffix });
            res.origin = Some(Origin::Generator {
                file: ctx.file.to_path_buf(),
                kind: generator_kind(kind),
                name: None,
            });
            map.append(res, &file)
        }
        (Behavior::Create, Some(_)) => Err(BuildError::DuplicateId {
            file,
            id: id.to_string(),
        }),
        (Behavior::Merge | Behavior::Replace, None) => Err(gen_err(format!(
            "id {id} does not exist; cannot merge or replace"
        ))),
        (behavior @ (Behavior::Merge | Behavior::Replace), Some(i)) => {
            let res = &mut map.resources[i];
            let old = res.obj().into_owned();
            let merged = merged_object(&old, obj, matches!(behavior, Behavior::Merge));
            res.replace(merged);
            // The hash suffix needs both: kustomize keeps the build annotations of the old
            // object (none on one it did not generate) and drops the suffix mark unless
            // the new generator sets it too.
            res.generated = res.generated.as_ref().map(|old| Generated {
                hash_suffix: old.hash_suffix && hash_suffix,
            });
            if matches!(behavior, Behavior::Replace) {
                res.origin = Some(Origin::Generator {
                    file: ctx.file.to_path_buf(),
                    kind: generator_kind(kind),
                    name: None,
                });
            }
            res.pack();
            Ok(())
        }
    }
}

/// The object a `merge` or `replace` generator leaves in place of `old`: the newly
/// generated `new` (so old fields such as `immutable`, `stringData` or a Secret's `type`
/// are gone), with old's name and namespace, old's labels and annotations under new's, and
/// with `merge` old's `data` and `binaryData` entries under new's, as text, keys sorted.
fn merged_object(old: &Map<String, Value>, mut new: Map<String, Value>, merge: bool) -> Map<String, Value> {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let meta = new
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("generated metadata is a map");
    for key in ["labels", "annotations"] {
        let mut entries = old_meta
            .and_then(|m| m.get(key))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Object(newer)) = meta.get(key) {
            entries.extend(newer.clone());
        }
        if entries.is_empty() {
            meta.remove(key);
        } else {
            meta.insert(key.into(), Value::Object(entries));
        }
    }
    for key in ["name", "namespace"] {
        match old_meta.and_then(|m| m.get(key)) {
            Some(value) => meta.insert(key.into(), value.clone()),
            None => meta.remove(key),
        };
    }
    if merge {
        for section in ["data", "binaryData"] {
            let mut entries = std::collections::BTreeMap::new();
            for from in [old.get(section), new.get(section)] {
                if let Some(Value::Object(m)) = from {
                    entries.extend(m.iter().map(|(k, v)| (k.clone(), as_text(v))));
                }
            }
            new.remove(section);
            if !entries.is_empty() {
                new.insert(section.into(), json!(entries));
            }
        }
    }
    new
}

/// A data value as kustomize reads it into a string map: a scalar's text, "" for
/// anything else.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null | Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// The builtin plugin kind of a generator, as origin annotations name it.
fn generator_kind(kind: GenKind) -> &'static str {
    match kind {
        GenKind::ConfigMap => "ConfigMapGenerator",
        GenKind::Secret => "SecretGenerator",
    }
}

fn merge_options(local: Option<&GeneratorOptions>, global: Option<&GeneratorOptions>) -> GeneratorOptions {
    let mut out = global.cloned().unwrap_or_default();
    if let Some(local) = local {
        out.labels.extend(local.labels.clone());
        out.annotations.extend(local.annotations.clone());
        if local.disable_name_suffix_hash == Some(true) {
            out.disable_name_suffix_hash = Some(true);
        }
        if local.immutable == Some(true) {
            out.immutable = Some(true);
        }
    }
    out
}

enum PairError {
    Build(BuildError),
    Message(String),
}

/// A key and its raw bytes.
type Pair = (String, Vec<u8>);

fn load_pairs(ctx: &Context<'_>, args: &GeneratorArgs) -> Result<Vec<Pair>, PairError> {
    let mut pairs: Vec<Pair> = Vec::new();
    for env in &args.envs {
        let path = ctx.dir.join(env);
        let text = ctx.loader.read_bytes(&path, ctx.file).map_err(PairError::Build)?;
        let text = String::from_utf8(text)
            .map_err(|_| PairError::Message(format!("env file {env} is not valid UTF-8")))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        for (n, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line).trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(PairError::Message(format!(
                    "{env}:{}: invalid key '{key}'",
                    n + 1
                )));
            }
            pairs.push((key.to_string(), value.as_bytes().to_vec()));
        }
    }
    for literal in &args.literals {
        let Some((key, value)) = literal.split_once('=') else {
            return Err(PairError::Message(format!(
                "invalid literal source '{literal}', expected key=value"
            )));
        };
        pairs.push((key.to_string(), unquote(value).as_bytes().to_vec()));
    }
    for source in &args.files {
        let (key, rel) = match source.split_once('=') {
            Some((k, p)) if !k.is_empty() && !p.is_empty() => (k.to_string(), p),
            Some(_) => return Err(PairError::Message(format!("invalid file source '{source}'"))),
            None => (
                Path::new(source)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                source.as_str(),
            ),
        };
        let path = ctx.dir.join(rel);
        if ctx.loader.is_dir(&path) {
            return Err(PairError::Message(format!("file source '{rel}' is a directory")));
        }
        let bytes = ctx.loader.read_bytes(&path, ctx.file).map_err(PairError::Build)?;
        pairs.push((key, bytes));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (key, _) in &pairs {
        if key.is_empty() {
            return Err(PairError::Message("empty key".into()));
        }
        if !seen.insert(key.clone()) {
            return Err(PairError::Message(format!("duplicate key '{key}'")));
        }
    }
    Ok(pairs)
}

/// Drops one pair of matching surrounding quotes, as kustomize does for literals.
fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return &s[1..s.len() - 1];
        }
    }
    s
}

fn make_object(
    kind: GenKind,
    args: &GeneratorArgs,
    options: &GeneratorOptions,
    pairs: &[Pair],
) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(args.name));
    if !args.namespace.is_empty() {
        meta.insert("namespace".into(), json!(args.namespace));
    }
    if !options.labels.is_empty() {
        meta.insert("labels".into(), json!(options.labels));
    }
    if !options.annotations.is_empty() {
        meta.insert("annotations".into(), json!(options.annotations));
    }
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!(kind.name()));
    obj.insert("metadata".into(), Value::Object(meta));
    let mut data = Map::new();
    let mut binary = Map::new();
    for (key, bytes) in pairs {
        match (kind, std::str::from_utf8(bytes)) {
            (GenKind::ConfigMap, Ok(text)) => {
                data.insert(key.clone(), json!(text));
            }
            (GenKind::ConfigMap, Err(_)) => {
                binary.insert(key.clone(), json!(base64_wrapped(bytes)));
            }
            (GenKind::Secret, _) => {
                data.insert(key.clone(), json!(base64_wrapped(bytes)));
            }
        }
    }
    // kustomize always gives a generated Secret a `data` map, empty or not; a ConfigMap
    // only when it has text entries.
    if !data.is_empty() || kind == GenKind::Secret {
        obj.insert("data".into(), Value::Object(data));
    }
    if !binary.is_empty() {
        obj.insert("binaryData".into(), Value::Object(binary));
    }
    if kind == GenKind::Secret {
        let t = if args.type_.is_empty() {
            "Opaque"
        } else {
            &args.type_
        };
        obj.insert("type".into(), json!(t));
    }
    if options.immutable == Some(true) {
        obj.insert("immutable".into(), json!(true));
    }
    obj
}

/// Standard base64, broken into 70-character lines each ending in `\n` once the encoded
/// text is 70 characters or longer (kyaml's encoding, part of the hash input).
pub(crate) fn base64_wrapped(bytes: &[u8]) -> String {
    const LINE: usize = 70;
    let encoded = STANDARD.encode(bytes);
    if encoded.len() < LINE {
        return encoded;
    }
    let mut out = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
    for chunk in encoded.as_bytes().chunks(LINE) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out
}

/// kustomize's content hash of a generated ConfigMap or Secret (10 characters).
pub(crate) fn content_hash(obj: &Map<String, Value>) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    // kustomize's hasher reads a missing (or scalar) section as "" and takes the optional
    // ones only when they are maps, empty or not.
    let section = |k: &str| match obj.get(k) {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!(""),
    };
    let is_map = |k: &str| obj.get(k).is_some_and(Value::is_object);
    // The name is always empty in kustomize's hash input (it looks up a key that never exists).
    let mut doc = Map::new();
    doc.insert("kind".into(), json!(kind));
    doc.insert("name".into(), json!(""));
    doc.insert("data".into(), section("data"));
    if kind == "Secret" {
        doc.insert("type".into(), obj.get("type").cloned().unwrap_or(json!("")));
        if is_map("stringData") {
            doc.insert("stringData".into(), section("stringData"));
        }
    } else if is_map("binaryData") {
        doc.insert("binaryData".into(), section("binaryData"));
    }
    let text = go_json(&Value::Object(doc));
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    digest[..10]
        .chars()
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            c => c,
        })
        .collect()
}

/// JSON as Go's encoding/json writes it: sorted keys, no spaces, HTML characters escaped.
fn go_json(v: &Value) -> String {
    let sorted = sort_keys(v);
    serde_json::to_string(&sorted)
        .expect("JSON values serialize")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<_> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_plain_standard_base64() {
        assert_eq!(base64_wrapped(b""), "");
        assert_eq!(base64_wrapped(b"f"), "Zg==");
        assert_eq!(base64_wrapped(b"fo"), "Zm8=");
        assert_eq!(base64_wrapped(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn long_values_wrap_at_70_with_trailing_newline() {
        let s = base64_wrapped(&[b'a'; 60]);
        let lines: Vec<&str> = s.split_terminator('\n').collect();
        assert_eq!(lines[0].len(), 70);
        assert!(s.ends_with('\n'));
        assert_eq!(lines.concat(), STANDARD.encode([b'a'; 60]));
    }

    #[test]
    fn literal_quotes_are_stripped_once() {
        assert_eq!(unquote("\"a b\""), "a b");
        assert_eq!(unquote("'x'"), "x");
        assert_eq!(unquote("\"x'"), "\"x'");
    }
}
