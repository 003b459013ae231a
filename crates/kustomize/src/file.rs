//! The kustomization.yaml model (kustomize api v0.21.1) with strict field checking:
//! unknown fields are errors, known fields this engine does not implement are
//! [`BuildError::Unsupported`], so a build never silently differs from kustomize.
//! Beside it, the model of what its fields name: `replacements` entries and `configurations`
//! files. The model imports no transformer; the transformers import it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::BuildError;
use super::selector::Selector;

/// Names kustomize accepts for a kustomization file, in lookup order.
pub const FILE_NAMES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Fields this engine implements.
const SUPPORTED: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "resources",
    "bases",
    "components",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "images",
    "imageTags",
    "replicas",
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "sortOptions",
    "buildMetadata",
    "configurations",
    "replacements",
    "vars",
    "crds",
    "openapi",
    "generators",
    "transformers",
    "validators",
    "helmGlobals",
];

/// Fields that inflate Helm charts, which Flux disables.
const HELM: &[&str] = &["helmCharts", "helmChartInflationGenerator"];

/// kustomize's refusal of Helm charts when Helm is disabled, as Flux runs it.
pub(crate) const HELM_DISABLED: &str = "must specify --enable-helm";

/// Whether a kustomization is a Kustomization or a Component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Kustomization,
    Component,
}

/// A parsed kustomization file.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct KustomizationFile {
    pub(crate) api_version: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) bases: Vec<String>,
    pub(crate) components: Vec<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) name_prefix: Option<String>,
    pub(crate) name_suffix: Option<String>,
    pub(crate) common_labels: BTreeMap<String, String>,
    pub(crate) labels: Vec<Label>,
    pub(crate) common_annotations: BTreeMap<String, String>,
    pub(crate) images: Vec<Image>,
    pub(crate) image_tags: Vec<Image>,
    pub(crate) replicas: Vec<Replica>,
    pub(crate) patches: Vec<Patch>,
    pub(crate) patches_strategic_merge: Vec<String>,
    pub(crate) patches_json6902: Vec<Patch>,
    pub(crate) config_map_generator: Vec<GeneratorArgs>,
    pub(crate) secret_generator: Vec<GeneratorArgs>,
    pub(crate) generator_options: Option<GeneratorOptions>,
    pub(crate) sort_options: Option<SortOptions>,
    pub(crate) build_metadata: Vec<String>,
    pub(crate) metadata: Option<Value>,
    pub(crate) configurations: Vec<String>,
    pub(crate) replacements: Vec<ReplacementField>,
    pub(crate) vars: Vec<Value>,
    pub(crate) crds: Vec<String>,
    /// `path` of a custom OpenAPI schema, or `version` of the builtin one.
    pub(crate) openapi: BTreeMap<String, String>,
    pub(crate) generators: Vec<String>,
    pub(crate) transformers: Vec<String>,
    pub(crate) validators: Vec<String>,
    pub(crate) helm_globals: Option<Value>,
}

/// One `labels` entry.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct Label {
    pub(crate) pairs: BTreeMap<String, String>,
    pub(crate) include_selectors: bool,
    pub(crate) include_templates: bool,
    pub(crate) fields: Vec<FieldSpec>,
}

/// Where a transformer writes: an optional GVK filter plus a `/`-separated path.
#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct FieldSpec {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) path: String,
    pub(crate) create: bool,
}

/// A `configurations` file (read by `configurations`): field specs beyond the builtin ones,
/// one list per transformer.
#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct Config {
    pub(crate) name_prefix: Vec<FieldSpec>,
    pub(crate) name_suffix: Vec<FieldSpec>,
    pub(crate) namespace: Vec<FieldSpec>,
    pub(crate) common_labels: Vec<FieldSpec>,
    pub(crate) labels: Vec<FieldSpec>,
    pub(crate) template_labels: Vec<FieldSpec>,
    pub(crate) volume_claim_template_labels: Vec<FieldSpec>,
    pub(crate) common_annotations: Vec<FieldSpec>,
    pub(crate) name_reference: Vec<NameBackReference>,
    pub(crate) var_reference: Vec<FieldSpec>,
    pub(crate) images: Vec<FieldSpec>,
    pub(crate) replicas: Vec<FieldSpec>,
}

/// A referenced kind and the fields (of other kinds) holding its name.
#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct NameBackReference {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) field_specs: Vec<FieldSpec>,
}

impl Config {
    /// Adds what `other` has and `self` lacks; the same spec with another `create` is an error.
    pub(crate) fn merge(&mut self, other: &Config) -> Result<(), String> {
        let lists = [
            (&mut self.name_prefix, &other.name_prefix),
            (&mut self.name_suffix, &other.name_suffix),
            (&mut self.namespace, &other.namespace),
            (&mut self.common_labels, &other.common_labels),
            (&mut self.labels, &other.labels),
            (&mut self.template_labels, &other.template_labels),
            (
                &mut self.volume_claim_template_labels,
                &other.volume_claim_template_labels,
            ),
            (&mut self.common_annotations, &other.common_annotations),
            (&mut self.var_reference, &other.var_reference),
            (&mut self.images, &other.images),
            (&mut self.replicas, &other.replicas),
        ];
        for (mine, theirs) in lists {
            merge_specs(mine, theirs)?;
        }
        for incoming in &other.name_reference {
            let same = |r: &&mut NameBackReference| {
                r.group == incoming.group && r.version == incoming.version && r.kind == incoming.kind
            };
            match self.name_reference.iter_mut().find(same) {
                Some(existing) => merge_specs(&mut existing.field_specs, &incoming.field_specs)?,
                None => self.name_reference.push(incoming.clone()),
            }
        }
        Ok(())
    }
}

/// kustomize's field-spec merge: a spec already present (same path, its group/version/kind
/// selected by the incoming one) is kept once.
pub(crate) fn merge_specs(into: &mut Vec<FieldSpec>, incoming: &[FieldSpec]) -> Result<(), String> {
    for spec in incoming {
        let present = into.iter().find(|s| {
            s.path == spec.path
                && (spec.group.is_empty() || spec.group == s.group)
                && (spec.version.is_empty() || spec.version == s.version)
                && (spec.kind.is_empty() || spec.kind == s.kind)
        });
        match present {
            Some(s) if s.create != spec.create => return Err("conflicting fieldspecs".into()),
            Some(_) => {}
            None => into.push(spec.clone()),
        }
    }
    Ok(())
}

/// One `replacements` entry: inline, or `path` to a file holding one or a list.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct ReplacementField {
    pub(crate) path: String,
    pub(crate) source: Option<ReplacementSource>,
    pub(crate) targets: Option<Vec<ReplacementTarget>>,
    pub(crate) source_value: Option<String>,
}

/// A source (or literal value) and where it goes.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct Replacement {
    pub(crate) source: Option<ReplacementSource>,
    pub(crate) targets: Option<Vec<ReplacementTarget>>,
    pub(crate) source_value: Option<String>,
}

/// Where a replacement's value comes from.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct ReplacementSource {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) field_path: String,
    pub(crate) options: Option<ReplacementOptions>,
}

/// Where a replacement's value goes.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct ReplacementTarget {
    pub(crate) select: Option<Selector>,
    pub(crate) reject: Vec<Selector>,
    pub(crate) field_paths: Vec<String>,
    pub(crate) options: Option<ReplacementOptions>,
}

/// How a replacement's value is cut from its source or written into a target.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct ReplacementOptions {
    pub(crate) delimiter: String,
    pub(crate) index: i64,
    pub(crate) encoding: String,
    pub(crate) create: bool,
}

/// One `images` entry.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct Image {
    pub(crate) name: String,
    pub(crate) new_name: String,
    pub(crate) new_tag: String,
    pub(crate) digest: String,
    pub(crate) tag_suffix: String,
}

/// One `replicas` entry.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) count: i64,
}

/// A `patches` (or `patchesJson6902`) entry.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Patch {
    pub(crate) path: Option<String>,
    pub(crate) patch: Option<String>,
    pub(crate) target: Option<Selector>,
    pub(crate) options: BTreeMap<String, bool>,
}

/// A configMapGenerator / secretGenerator entry.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct GeneratorArgs {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) behavior: String,
    pub(crate) literals: Vec<String>,
    pub(crate) files: Vec<String>,
    pub(crate) envs: Vec<String>,
    pub(crate) env: String,
    pub(crate) options: Option<GeneratorOptions>,
    #[serde(rename = "type")]
    pub(crate) type_: String,
    pub(crate) kv_sources: Option<Value>,
}

/// `generatorOptions`, global or per generator.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct GeneratorOptions {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) disable_name_suffix_hash: Option<bool>,
    pub(crate) immutable: Option<bool>,
}

/// `sortOptions`.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct SortOptions {
    pub(crate) order: String,
    pub(crate) legacy_sort_options: Option<LegacySortOptions>,
}

/// Kind lists that replace the legacy order's defaults.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub(crate) struct LegacySortOptions {
    pub(crate) order_first: Vec<String>,
    pub(crate) order_last: Vec<String>,
}

impl KustomizationFile {
    /// Parses kustomization text from `file`, checking every top-level field.
    pub(crate) fn parse(text: &str, file: &str) -> Result<(KustomizationFile, Kind), BuildError> {
        // kustomize decodes kustomization files with sigs.k8s.io/yaml (YAML 1.1): `y` is a
        // boolean there, and a boolean where a string belongs is an error.
        let mut map = super::yaml::parse_object_yaml11(text, file)?;
        // kustomize decodes through JSON into Go types, where null is the zero value.
        drop_nulls(&mut map, false);
        if map.is_empty() {
            return Err(BuildError::Kustomization {
                file: file.to_string(),
                message: "kustomization.yaml is empty".into(),
            });
        }
        check_fields(&map, file)?;
        let mut k: KustomizationFile = serde_json::from_value(Value::Object(map.clone())).map_err(|e| {
            let field = map
                .keys()
                .find(|key| e.to_string().contains(key.as_str()))
                .cloned()
                .unwrap_or_default();
            BuildError::Invalid {
                file: file.to_string(),
                field,
                message: e.to_string(),
            }
        })?;
        let api_version = k.api_version.as_deref().unwrap_or("");
        let kind = match k.kind.as_deref().unwrap_or("") {
            "" | "Kustomization" => Kind::Kustomization,
            "Component" => Kind::Component,
            other => {
                return Err(BuildError::Invalid {
                    file: file.into(),
                    field: "kind".into(),
                    message: format!("unknown kind '{other}'"),
                });
            }
        };
        let (name, want) = match kind {
            Kind::Kustomization => ("Kustomization", "kustomize.config.k8s.io/v1beta1"),
            Kind::Component => ("Component", "kustomize.config.k8s.io/v1alpha1"),
        };
        if !api_version.is_empty() && api_version != want {
            return Err(BuildError::Invalid {
                file: file.into(),
                field: "apiVersion".into(),
                message: format!("apiVersion for {name} should be {want}"),
            });
        }
        // Deprecated spellings, as kustomize's FixKustomization folds them.
        k.resources.append(&mut k.bases);
        k.images.append(&mut k.image_tags);
        for g in k
            .config_map_generator
            .iter_mut()
            .chain(k.secret_generator.iter_mut())
        {
            if g.kv_sources.is_some() {
                return Err(BuildError::Unsupported {
                    file: file.into(),
                    field: format!("generator '{}' kvSources", g.name),
                });
            }
            if !g.env.is_empty() {
                g.envs.push(std::mem::take(&mut g.env));
            }
        }
        if let Some(other) = k
            .build_metadata
            .iter()
            .find(|b| b.as_str() != "originAnnotations" && b.as_str() != "transformerAnnotations")
        {
            return Err(BuildError::Unsupported {
                file: file.into(),
                field: format!("buildMetadata: {other}"),
            });
        }
        if let Some(order) = k.sort_options.as_ref().map(|s| s.order.as_str())
            && order != "fifo"
            && order != "legacy"
        {
            return Err(BuildError::Unsupported {
                file: file.into(),
                field: format!("sortOptions.order: {order}"),
            });
        }
        Ok((k, kind))
    }
}

/// Fields whose values are string maps (labels, annotations): a null value there is "".
const STRING_MAPS: &[&str] = &[
    "commonLabels",
    "commonAnnotations",
    "pairs",
    "labels",
    "annotations",
];

/// Lists of entries (not strings); kustomize decodes a null entry as an empty one, which
/// then means "nothing" (`images`, `labels`) or fails as incomplete (`patches`, generators).
const STRUCT_LISTS: &[&str] = &[
    "images",
    "imageTags",
    "labels",
    "replicas",
    "patches",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "replacements",
    "vars",
    "fields",
    "targets",
];

/// Removes null fields from `map` and the maps below it, as a null decodes to an empty
/// field; inside a string map (`in_string_map`) a null value is the empty string instead.
fn drop_nulls(map: &mut Map<String, Value>, in_string_map: bool) {
    if in_string_map {
        for value in map.values_mut().filter(|v| v.is_null()) {
            *value = Value::String(String::new());
        }
        return;
    }
    map.retain(|_, v| !v.is_null());
    for (key, value) in map.iter_mut() {
        let string_map = STRING_MAPS.contains(&key.as_str());
        match value {
            Value::Object(m) => drop_nulls(m, string_map),
            Value::Array(items) => {
                if STRUCT_LISTS.contains(&key.as_str()) {
                    // A null entry is an entry with every field unset.
                    for item in items.iter_mut().filter(|v| v.is_null()) {
                        *item = Value::Object(Map::new());
                    }
                }
                items
                    .iter_mut()
                    .filter_map(Value::as_object_mut)
                    .for_each(|m| drop_nulls(m, false))
            }
            _ => {}
        }
    }
}

fn check_fields(map: &Map<String, Value>, file: &str) -> Result<(), BuildError> {
    for (key, value) in map {
        if SUPPORTED.contains(&key.as_str()) {
            continue;
        }
        let empty = match value {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        };
        if HELM.contains(&key.as_str()) && !empty {
            return Err(BuildError::Kustomization {
                file: file.to_string(),
                message: format!(
                    "trouble configuring builtin HelmChartInflationGenerator: {}",
                    HELM_DISABLED
                ),
            });
        }
        if HELM.contains(&key.as_str()) {
            if empty {
                continue;
            }
            return Err(BuildError::Unsupported {
                file: file.to_string(),
                field: key.clone(),
            });
        }
        return Err(BuildError::Invalid {
            file: file.to_string(),
            field: key.clone(),
            message: "unknown field".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_an_error_naming_it() {
        let err = KustomizationFile::parse("resources: []\nresourcez: [a]\n", "app/kustomization.yaml")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "app/kustomization.yaml: invalid field 'resourcez': unknown field"
        );
    }

    #[test]
    fn helm_charts_are_refused_with_kustomizes_message() {
        let err = KustomizationFile::parse("helmCharts:\n- name: x\n", "k.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "k.yaml: trouble configuring builtin HelmChartInflationGenerator: must specify --enable-helm"
        );
    }

    #[test]
    fn deprecated_fields_fold_into_current_ones() {
        let (k, kind) = KustomizationFile::parse(
            "bases: [../b]\nresources: [a.yaml]\nimageTags: [{name: x, newTag: '1'}]\n",
            "k",
        )
        .unwrap();
        assert_eq!(k.resources, vec!["a.yaml", "../b"]);
        assert_eq!(k.images[0].new_tag, "1");
        assert_eq!(kind, Kind::Kustomization);
    }

    #[test]
    fn null_fields_are_empty_and_null_label_values_are_empty_strings() {
        let (k, _) = KustomizationFile::parse(
            "resources:\npatches:\ncommonLabels:\n  a:\nconfigMapGenerator:\n- name: g\n  literals:\n",
            "k",
        )
        .unwrap();
        assert!(k.resources.is_empty() && k.patches.is_empty());
        assert_eq!(k.common_labels.get("a").map(String::as_str), Some(""));
        assert_eq!(k.config_map_generator[0].name, "g");
    }

    #[test]
    fn api_version_must_match_the_kind() {
        let err = KustomizationFile::parse(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Component\n",
            "k",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "k: invalid field 'apiVersion': apiVersion for Component should be kustomize.config.k8s.io/v1alpha1"
        );
        let err = KustomizationFile::parse(
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nresources: []\n",
            "k",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("apiVersion for Kustomization should be kustomize.config.k8s.io/v1beta1")
        );
    }

    #[test]
    fn component_kind_is_recognised() {
        let (_, kind) = KustomizationFile::parse(
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
            "k",
        )
        .unwrap();
        assert_eq!(kind, Kind::Component);
    }
}
