//! `configurations:`: files of field specs that extend the builtin tables (name references,
//! labels, annotations, namespace, prefixes, images, replicas, var references), mostly so
//! the builtin transformers reach into custom resources.
//!
//! Scope, as kustomize has it: a kustomization's transformers see its own files plus every
//! file of the bases and components accumulated into it; name references and var
//! references are resolved once at the top with the files of the whole tree.

use std::path::Path;

use regex::Regex;
use serde_json::{Map, Value};

use super::error::BuildError;
use super::file::{Config, FieldSpec, NameBackReference, merge_specs};
use super::loader::Loader;
use super::resmap::{ResMap, Resource};
use super::transform::{change_at, selects};

/// Reads and merges the `configurations` files of one kustomization.
pub(crate) fn load(loader: &Loader, dir: &Path, file: &Path, paths: &[String]) -> Result<Config, BuildError> {
    merge_files(loader, dir, file, paths, &|text, shown| {
        let map = super::yaml::parse_object_yaml11(text, shown)?;
        serde_json::from_value(Value::Object(map)).map_err(|e| BuildError::Invalid {
            file: shown.to_string(),
            field: "configurations".into(),
            message: e.to_string(),
        })
    })
}

/// The field specs kustomize derives from `crds:` files: OpenAPI definitions (type name to
/// `{Schema: ...}`) whose properties carry `x-kubernetes-*` markers. Only types that look
/// like Kubernetes objects (`kind`, `apiVersion` and `metadata` properties) are read; `$ref`
/// properties are followed into the referenced definitions.
pub(crate) fn load_crds(
    loader: &Loader,
    dir: &Path,
    file: &Path,
    paths: &[String],
) -> Result<Config, BuildError> {
    merge_files(loader, dir, file, paths, &|text, shown| {
        let doc = super::yaml::parse_documents_yaml11(text, shown)?
            .into_iter()
            .next();
        let not_definitions = |found: &str| BuildError::Kustomization {
            file: shown.to_string(),
            message: format!(
                "unable to parse open API definition: expected a map of type names to definitions, found {found}"
            ),
        };
        let Some(Value::Object(definitions)) = doc else {
            return Err(not_definitions("no map"));
        };
        if let Some((name, _)) = definitions.iter().find(|(_, d)| !d.is_object()) {
            return Err(not_definitions(&format!("'{name}' that is not a definition")));
        }
        let mut out = Config::default();
        for (name, definition) in &definitions {
            let props = properties(definition);
            let object_like = ["kind", "apiVersion", "metadata"]
                .iter()
                .all(|k| props.is_some_and(|p| p.contains_key(*k)));
            if object_like {
                let kind = name.rsplit('.').next().unwrap_or(name);
                crd_specs(&definitions, name, kind, &mut Vec::new(), &mut out);
            }
        }
        Ok(out)
    })
}

/// Reads each file of `paths` with `parse` and merges the results in order.
fn merge_files(
    loader: &Loader,
    dir: &Path,
    file: &Path,
    paths: &[String],
    parse: &dyn Fn(&str, &str) -> Result<Config, BuildError>,
) -> Result<Config, BuildError> {
    let mut out = Config::default();
    for entry in paths {
        let path = dir.join(entry);
        let text = loader.read_text(&path, file)?;
        let shown = loader.show(&path);
        let config = parse(&text, &shown)?;
        out.merge(&config)
            .map_err(|message| BuildError::Kustomization { file: shown, message })?;
    }
    Ok(out)
}

/// The `properties` of a definition's schema (`Schema` matched case-insensitively).
fn properties(definition: &Value) -> Option<&Map<String, Value>> {
    let schema = definition
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("schema"))?
        .1;
    schema.get("properties")?.as_object()
}

/// A string-valued `x-` extension of a property.
fn extension<'a>(property: &'a Value, key: &str) -> Option<&'a str> {
    property
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))?
        .1
        .as_str()
}

/// Bounds `$ref` chains, which may be cyclic.
const MAX_REF_DEPTH: usize = 32;

fn crd_specs(
    definitions: &Map<String, Value>,
    type_name: &str,
    kind: &str,
    path: &mut Vec<String>,
    out: &mut Config,
) {
    let Some(props) = definitions.get(type_name).and_then(properties) else {
        return;
    };
    if path.len() > MAX_REF_DEPTH {
        return;
    }
    for (name, property) in props {
        path.push(name.clone());
        let spec = |extra: &[&str]| {
            let mut parts = path.clone();
            parts.extend(extra.iter().map(|s| s.to_string()));
            FieldSpec {
                kind: kind.to_string(),
                path: parts.join("/"),
                ..FieldSpec::default()
            }
        };
        // Specs read from one schema never conflict: all are created with `create: false`.
        if extension(property, "x-kubernetes-annotation").is_some() {
            let _ = merge_specs(&mut out.common_annotations, &[spec(&[])]);
        }
        if extension(property, "x-kubernetes-label-selector").is_some() {
            let _ = merge_specs(&mut out.common_labels, &[spec(&[])]);
        }
        if extension(property, "x-kubernetes-identity").is_some() {
            let _ = merge_specs(&mut out.name_prefix, &[spec(&[])]);
        }
        if let (Some(version), Some(ref_kind)) = (
            extension(property, "x-kubernetes-object-ref-api-version"),
            extension(property, "x-kubernetes-object-ref-kind"),
        ) {
            let key = extension(property, "x-kubernetes-object-ref-name-key").unwrap_or("name");
            let incoming = Config {
                name_reference: vec![NameBackReference {
                    version: version.to_string(),
                    kind: ref_kind.to_string(),
                    field_specs: vec![spec(&[key])],
                    ..NameBackReference::default()
                }],
                ..Config::default()
            };
            let _ = out.merge(&incoming);
        }
        if let Some(target) = property
            .get("$ref")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            crd_specs(definitions, target, kind, path, out);
        }
        path.pop();
    }
}

/// The builtin table `builtin` extended by `extra`.
pub(crate) fn with_builtin(
    mut builtin: Vec<FieldSpec>,
    extra: &[FieldSpec],
    file: &str,
) -> Result<Vec<FieldSpec>, BuildError> {
    merge_specs(&mut builtin, extra).map_err(|message| BuildError::Kustomization {
        file: file.into(),
        message,
    })?;
    Ok(builtin)
}

/// Writes `value(old)` into every string at `spec` of `res` (created when the spec says so).
fn set_strings(res: &mut Resource, spec: &FieldSpec, value: &dyn Fn(&str) -> Option<String>) {
    change_at(res, spec, &|v| {
        let old = match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            _ => return,
        };
        if let Some(new) = value(&old) {
            *v = Value::String(new);
        }
    });
}

/// The custom `namespace` specs: the namespace written at each path.
pub(crate) fn namespace(map: &mut ResMap, namespace: &str, specs: &[FieldSpec]) {
    if specs.is_empty() {
        return;
    }
    map.each(|res| {
        let id = res.id();
        for spec in specs
            .iter()
            .filter(|s| selects(s, &id) && s.path != "metadata/namespace")
        {
            set_strings(res, spec, &|_| Some(namespace.to_string()));
        }
    });
}

/// The custom `namePrefix`/`nameSuffix` specs: the name at `metadata/name` is the builtin's
/// job, other paths get the prefix or suffix added to what they hold.
pub(crate) fn prefix_suffix(map: &mut ResMap, prefix: &str, suffix: &str, config: &Config) {
    let jobs = [
        (prefix, &config.name_prefix, true),
        (suffix, &config.name_suffix, false),
    ];
    for (affix, specs, front) in jobs {
        if affix.is_empty() || specs.is_empty() {
            continue;
        }
        map.each(|res| {
            let orig = res.orig.clone();
            if super::transform::names::skipped(&orig.group, &orig.kind) {
                return;
            }
            for spec in specs
                .iter()
                .filter(|s| selects(s, &orig) && s.path != "metadata/name")
            {
                set_strings(res, spec, &|old| {
                    Some(if front {
                        format!("{affix}{old}")
                    } else {
                        format!("{old}{affix}")
                    })
                });
            }
        });
    }
}

/// The custom `images` specs: an image string at each path rewritten when `re` matches it.
pub(crate) fn images(map: &mut ResMap, re: &Regex, rewrite: &dyn Fn(&str) -> String, specs: &[FieldSpec]) {
    if specs.is_empty() {
        return;
    }
    map.each(|res| {
        let id = res.id();
        for spec in specs.iter().filter(|s| selects(s, &id)) {
            set_strings(res, spec, &|old| re.is_match(old).then(|| rewrite(old)));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, path: &str, create: bool) -> FieldSpec {
        FieldSpec {
            kind: kind.into(),
            path: path.into(),
            create,
            ..FieldSpec::default()
        }
    }

    #[test]
    fn merging_keeps_one_copy_and_refuses_a_conflicting_create() {
        let mut specs = vec![spec("Database", "spec/labels", true)];
        merge_specs(
            &mut specs,
            &[
                spec("Database", "spec/labels", true),
                spec("Cache", "spec/labels", false),
            ],
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        let err = merge_specs(&mut specs, &[spec("Cache", "spec/labels", true)]).unwrap_err();
        assert_eq!(err, "conflicting fieldspecs");
    }

    #[test]
    fn name_references_to_the_same_kind_are_merged() {
        let parse = |text: &str| -> Config {
            serde_json::from_value(Value::Object(
                super::super::yaml::parse_object_yaml11(text, "c").unwrap(),
            ))
            .unwrap()
        };
        let mut config =
            parse("nameReference:\n- kind: Secret\n  fieldSpecs:\n  - {kind: A, path: spec/s}\n");
        config
            .merge(&parse(
                "nameReference:\n- kind: Secret\n  fieldSpecs:\n  - {kind: B, path: spec/s}\n- kind: Issuer\n  fieldSpecs:\n  - {kind: C, path: spec/i}\n",
            ))
            .unwrap();
        assert_eq!(config.name_reference.len(), 2);
        assert_eq!(config.name_reference[0].field_specs.len(), 2);
    }

    #[test]
    fn an_unknown_table_is_an_error() {
        let map = super::super::yaml::parse_object_yaml11("nameRefs: []\n", "c").unwrap();
        assert!(serde_json::from_value::<Config>(Value::Object(map)).is_err());
    }
}
