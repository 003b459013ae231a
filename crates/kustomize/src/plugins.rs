//! `generators:`, `transformers:` and `validators:`: configs of kustomize's builtin plugins
//! (`apiVersion: builtin`), given inline, in files, or as the output of a kustomization
//! directory. Flux allows builtin plugins only, so any other config is refused with
//! kustomize's own message, as are Helm charts.
//!
//! A config behaves as the kustomization field it stands for, with its own field specs:
//! PrefixSuffixTransformer (also PrefixTransformer, SuffixTransformer), LabelTransformer,
//! AnnotationsTransformer, NamespaceTransformer, ImageTagTransformer,
//! ReplicaCountTransformer, PatchTransformer, PatchStrategicMergeTransformer,
//! PatchJson6902Transformer, ReplacementTransformer, HashTransformer, ConfigMapGenerator and
//! SecretGenerator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::buildmeta;
use super::error::BuildError;
use super::file::{
    FieldSpec, GeneratorArgs, HELM_DISABLED, Image, Patch, Replacement, ReplacementField, Replica,
};
use super::generators::{self, GenKind};
use super::loader::Loader;
use super::patch::transformer as patches;
use super::replacements;
use super::resmap::{Origin, ResMap, str_at};
use super::selector::Selector;
use super::transform::{self, namespace::Subjects};
use super::yaml;

/// Builtin kinds this engine does not implement (refused, never built differently).
const NOT_IMPLEMENTED: &[&str] = &["ValueAddTransformer", "IAMPolicyGenerator"];

/// Where a kustomization's plugin entries are read from.
pub(crate) struct Context<'a> {
    pub(crate) loader: &'a Loader,
    /// Directory of the kustomization (canonical): patch and generator sources are
    /// relative to it, whichever file holds the config.
    pub(crate) dir: &'a Path,
    /// The kustomization file.
    pub(crate) file: &'a Path,
}

impl Context<'_> {
    fn err(&self, message: impl Into<String>) -> BuildError {
        BuildError::Kustomization {
            file: self.loader.show(self.file),
            message: message.into(),
        }
    }
}

/// Builds a kustomization directory listed as a plugin entry (its accumulated objects).
pub(crate) type BuildDir<'b> = dyn FnMut(&Path) -> Result<ResMap, BuildError> + 'b;

/// Runs the `generators:` entries: each config's objects join the map as the kustomization's
/// own generators' do (behavior create, merge or replace).
pub(crate) fn generate(
    ctx: &Context<'_>,
    map: &mut ResMap,
    entries: &[String],
    build_dir: &mut BuildDir<'_>,
) -> Result<(), BuildError> {
    let generator_ctx = generators::Context {
        loader: ctx.loader,
        dir: ctx.dir,
        file: ctx.file,
    };
    for config in load(ctx, entries, build_dir)? {
        match parse(ctx, &config.object)? {
            Plugin::Generator(kind, args) => {
                let before = map.resources.len();
                generators::run(&generator_ctx, map, kind, &args, None)?;
                // A new object names the config that made it (a merged one keeps its origin).
                for res in &mut map.resources[before..] {
                    if let Some(Origin::Generator { file, name, .. }) = &mut res.origin {
                        *file = config.file.clone();
                        *name = Some(str_at(&config.object, &["metadata", "name"]).to_string());
                    }
                }
            }
            Plugin::Transformer(_) => {
                return Err(ctx.err(format!("plugin {} not a generator", config_id(&config.object))));
            }
        }
    }
    Ok(())
}

/// Runs the `transformers:` entries in order.
pub(crate) fn transform(
    ctx: &Context<'_>,
    map: &mut ResMap,
    entries: &[String],
    build_dir: &mut BuildDir<'_>,
) -> Result<(), BuildError> {
    for (transformer, config) in transformers(ctx, entries, build_dir)? {
        transformer.run(ctx, map)?;
        let (kind, name) = (
            str_at(&config.object, &["kind"]),
            str_at(&config.object, &["metadata", "name"]),
        );
        buildmeta::ran(map, &config.file, kind, Some(name), 1);
    }
    Ok(())
}

/// Runs the `validators:` entries: each runs as a transformer on a copy of the map and must
/// leave it as it was (apart from a `validated-by` label).
pub(crate) fn validate(
    ctx: &Context<'_>,
    map: &ResMap,
    entries: &[String],
    build_dir: &mut BuildDir<'_>,
) -> Result<(), BuildError> {
    for (transformer, _) in transformers(ctx, entries, build_dir)? {
        let mut copy = map.clone();
        transformer.run(ctx, &mut copy)?;
        copy.each(|res| {
            let labeled = res
                .obj()
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get("validated-by"))
                .is_some();
            if labeled && let Some(Value::Object(labels)) = res.metadata_mut().get_mut("labels") {
                labels.remove("validated-by");
            }
        });
        let unchanged = copy.resources.len() == map.resources.len()
            && copy
                .resources
                .iter()
                .zip(&map.resources)
                .all(|(a, b)| a.obj() == b.obj());
        if !unchanged {
            return Err(ctx.err("validator shouldn't modify the resource map"));
        }
    }
    Ok(())
}

fn transformers(
    ctx: &Context<'_>,
    entries: &[String],
    build_dir: &mut BuildDir<'_>,
) -> Result<Vec<(Transformer, Config)>, BuildError> {
    let mut out = Vec::new();
    for config in load(ctx, entries, build_dir)? {
        match parse(ctx, &config.object)? {
            Plugin::Transformer(t) => out.push((t, config)),
            Plugin::Generator(..) => {
                return Err(ctx.err(format!("plugin {} not a transformer", config_id(&config.object))));
            }
        }
    }
    Ok(out)
}

/// A plugin config object and the file it was written in.
struct Config {
    object: Map<String, Value>,
    file: PathBuf,
}

/// The config objects of `entries`, in order: an entry that parses as YAML objects is an
/// inline config; any other entry is a file or a kustomization directory.
fn load(
    ctx: &Context<'_>,
    entries: &[String],
    build_dir: &mut BuildDir<'_>,
) -> Result<Vec<Config>, BuildError> {
    let mut out = Vec::new();
    let config = |object, file: &Path| Config {
        object,
        file: file.to_path_buf(),
    };
    // kustomize takes every inline config first, then the files and directories.
    let mut paths = Vec::new();
    for entry in entries {
        match inline_configs(entry) {
            Some(inline) => out.extend(inline.into_iter().map(|o| config(o, ctx.file))),
            None => paths.push(entry),
        }
    }
    for entry in paths {
        let path = ctx.dir.join(entry);
        if ctx.loader.is_file(&path) {
            let text = ctx.loader.read_text(&path, ctx.file)?;
            let objects = yaml::parse_resources(&text, &ctx.loader.show(&path), Ok)?;
            out.extend(objects.into_iter().map(|o| config(o, &path)));
        } else if ctx.loader.is_dir(&path) {
            let dir = ctx.loader.resolve(&path, ctx.file)?;
            let built = build_dir(&dir)?;
            out.extend(built.resources.iter().map(|r| {
                let file = match &r.origin {
                    Some(Origin::File(f)) => f.as_path(),
                    _ => dir.as_path(),
                };
                config(r.obj().into_owned(), file)
            }));
        } else {
            ctx.loader.resolve(&path, ctx.file)?;
            return Err(ctx.err(format!("'{entry}' is neither a file nor a directory")));
        }
    }
    Ok(out)
}

fn inline_configs(entry: &str) -> Option<Vec<Map<String, Value>>> {
    if !entry.contains('\n') {
        return None;
    }
    let docs = yaml::parse_documents(entry, "inline plugin config").ok()?;
    docs.into_iter()
        .map(|d| match d {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
}

/// kustomize's id of a config object in messages: `Kind.builtin.[noGrp]/name.[noNs]`.
fn config_id(config: &Map<String, Value>) -> String {
    let namespace = match str_at(config, &["metadata", "namespace"]) {
        "" => "[noNs]",
        ns => ns,
    };
    format!(
        "{}.builtin.[noGrp]/{}.{namespace}",
        str_at(config, &["kind"]),
        str_at(config, &["metadata", "name"])
    )
}

enum Plugin {
    Generator(GenKind, GeneratorArgs),
    Transformer(Transformer),
}

/// A configured builtin transformer.
enum Transformer {
    Names {
        prefix: String,
        suffix: String,
        field_specs: Vec<FieldSpec>,
    },
    Labels {
        pairs: BTreeMap<String, String>,
        field_specs: Vec<FieldSpec>,
        annotations: bool,
    },
    Namespace(transform::namespace::Options),
    Image(Image, Vec<FieldSpec>),
    Replicas(Replica, Vec<FieldSpec>),
    Patch(Patch),
    StrategicMerge(Vec<String>),
    Json6902(Patch),
    Replacements(Vec<Replacement>),
    Hash,
}

fn parse(ctx: &Context<'_>, config: &Map<String, Value>) -> Result<Plugin, BuildError> {
    let kind = str_at(config, &["kind"]);
    if str_at(config, &["apiVersion"]) != "builtin" {
        return Err(ctx.err(format!(
            "external plugins disabled; unable to load external plugin '{kind}'"
        )));
    }
    let configure = |message: String| {
        ctx.err(format!(
            "plugin {} fails configuration: {message}",
            config_id(config)
        ))
    };
    fn decode<T: DeserializeOwned>(config: &Map<String, Value>) -> Result<T, String> {
        serde_json::from_value(Value::Object(config.clone())).map_err(|e| e.to_string())
    }
    let transformer = match kind {
        "PrefixSuffixTransformer" | "PrefixTransformer" | "SuffixTransformer" => {
            let c: NamesConfig = decode(config).map_err(configure)?;
            let field_specs = c
                .field_specs
                .ok_or_else(|| configure("fieldSpecs is not expected to be nil".into()))?;
            Transformer::Names {
                prefix: if kind == "SuffixTransformer" {
                    String::new()
                } else {
                    c.prefix
                },
                suffix: if kind == "PrefixTransformer" {
                    String::new()
                } else {
                    c.suffix
                },
                field_specs,
            }
        }
        "LabelTransformer" => {
            let c: LabelsConfig = decode(config).map_err(configure)?;
            Transformer::Labels {
                pairs: c.labels,
                field_specs: c.field_specs,
                annotations: false,
            }
        }
        "AnnotationsTransformer" => {
            let c: LabelsConfig = decode(config).map_err(configure)?;
            Transformer::Labels {
                pairs: c.annotations,
                field_specs: c.field_specs,
                annotations: true,
            }
        }
        "NamespaceTransformer" => {
            let c: NamespaceConfig = decode(config).map_err(configure)?;
            let subjects = match c.set_role_binding_subjects.as_str() {
                "" | "defaultOnly" => Subjects::DefaultOnly,
                "allServiceAccounts" => Subjects::AllServiceAccounts,
                "none" => Subjects::None,
                other => {
                    return Err(configure(format!(
                        "invalid value for setRoleBindingSubjects: {other}"
                    )));
                }
            };
            Transformer::Namespace(transform::namespace::Options {
                namespace: str_at(config, &["metadata", "namespace"]).to_string(),
                field_specs: c.field_specs,
                unset_only: c.unset_only,
                subjects,
            })
        }
        "ImageTagTransformer" => {
            let c: ImageConfig = decode(config).map_err(configure)?;
            Transformer::Image(c.image_tag, c.field_specs)
        }
        "ReplicaCountTransformer" => {
            let c: ReplicaConfig = decode(config).map_err(configure)?;
            Transformer::Replicas(c.replica, c.field_specs)
        }
        "PatchTransformer" => {
            let c: PatchConfig = decode(config).map_err(configure)?;
            Transformer::Patch(c.into_patch(None))
        }
        "PatchJson6902Transformer" => {
            let c: PatchConfig = decode(config).map_err(configure)?;
            let op = c.json_op.clone();
            Transformer::Json6902(c.into_patch(op))
        }
        "PatchStrategicMergeTransformer" => {
            let c: StrategicMergeConfig = decode(config).map_err(configure)?;
            let mut entries = c.paths;
            entries.extend(c.patches.filter(|p| !p.trim().is_empty()));
            Transformer::StrategicMerge(entries)
        }
        "ReplacementTransformer" => {
            let c: ReplacementConfig = decode(config).map_err(configure)?;
            let shown = ctx.loader.show(ctx.file);
            Transformer::Replacements(replacements::load(
                ctx.loader,
                ctx.dir,
                ctx.file,
                &shown,
                &c.replacements,
            )?)
        }
        "HashTransformer" => Transformer::Hash,
        "ConfigMapGenerator" | "SecretGenerator" => {
            let mut args: GeneratorArgs = decode(&generator_fields(config)).map_err(configure)?;
            if args.name.is_empty() {
                args.name = str_at(config, &["metadata", "name"]).to_string();
            }
            if args.namespace.is_empty() {
                args.namespace = str_at(config, &["metadata", "namespace"]).to_string();
            }
            if !args.env.is_empty() {
                args.envs.push(std::mem::take(&mut args.env));
            }
            let gen_kind = if kind == "ConfigMapGenerator" {
                GenKind::ConfigMap
            } else {
                GenKind::Secret
            };
            return Ok(Plugin::Generator(gen_kind, args));
        }
        "HelmChartInflationGenerator" => return Err(configure(HELM_DISABLED.into())),
        k if NOT_IMPLEMENTED.contains(&k) => {
            return Err(BuildError::Unsupported {
                file: ctx.loader.show(ctx.file),
                field: format!("builtin plugin {k}"),
            });
        }
        other => return Err(ctx.err(format!("unable to load builtin {other}.builtin.[noGrp]"))),
    };
    Ok(Plugin::Transformer(transformer))
}

/// The fields of a generator config that `GeneratorArgs` knows (the rest, such as
/// apiVersion and metadata, belongs to the config object).
fn generator_fields(config: &Map<String, Value>) -> Map<String, Value> {
    const FIELDS: &[&str] = &[
        "name",
        "namespace",
        "behavior",
        "literals",
        "files",
        "envs",
        "env",
        "options",
        "type",
    ];
    config
        .iter()
        .filter(|(k, _)| FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl Transformer {
    /// The field specs a builtin transformer writes at, with the kind kustomize names it by.
    fn field_specs(&self) -> Option<(&[FieldSpec], &'static str)> {
        match self {
            Transformer::Names { field_specs, .. } => Some((field_specs, "PrefixSuffixTransformer")),
            Transformer::Labels {
                field_specs,
                annotations: true,
                ..
            } => Some((field_specs, "AnnotationsTransformer")),
            Transformer::Labels { field_specs, .. } => Some((field_specs, "LabelTransformer")),
            Transformer::Namespace(options) => Some((&options.field_specs, "NamespaceTransformer")),
            Transformer::Image(_, specs) => Some((specs, "ImageTagTransformer")),
            Transformer::Replicas(_, specs) => Some((specs, "ReplicaCountTransformer")),
            _ => None,
        }
    }

    fn run(&self, ctx: &Context<'_>, map: &mut ResMap) -> Result<(), BuildError> {
        let file = ctx.loader.show(ctx.file);
        if let Some((specs, kind)) = self.field_specs() {
            transform::refuse_empty_paths(map, specs, &file, kind)?;
        }
        let patch_ctx = patches::Context {
            loader: ctx.loader,
            dir: ctx.dir,
            file: ctx.file,
        };
        match self {
            Transformer::Names {
                prefix,
                suffix,
                field_specs,
            } => transform::names::apply_specs(map, prefix, suffix, field_specs),
            Transformer::Labels {
                pairs, field_specs, ..
            } => {
                let field = self.field_specs().map_or("", |(_, kind)| kind);
                transform::labels::apply(map, pairs, field_specs, &file, field)?;
            }
            Transformer::Namespace(options) => {
                if !options.namespace.is_empty() {
                    transform::namespace::apply_with(map, options);
                    map.check_unique(&file)?;
                }
            }
            Transformer::Image(image, specs) => {
                transform::images::apply_specs(map, image, specs, &file, &[])?
            }
            Transformer::Replacements(found) => replacements::apply(map, found, &file)?,
            Transformer::Replicas(replica, specs) => {
                transform::replicas::apply_specs(map, replica, specs, &file)?
            }
            Transformer::Patch(patch) => patches::patches(&patch_ctx, map, std::slice::from_ref(patch))?,
            Transformer::StrategicMerge(entries) => patches::strategic_merge(&patch_ctx, map, entries)?,
            Transformer::Json6902(patch) => patches::json6902(&patch_ctx, map, std::slice::from_ref(patch))?,
            Transformer::Hash => map.each(|res| {
                if res.generated.as_ref().is_some_and(|g| g.hash_suffix) {
                    let name = format!("{}-{}", res.id().name, generators::content_hash(&res.obj()));
                    res.set_name(name);
                }
            }),
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct ReplacementConfig {
    #[serde(default)]
    replacements: Vec<ReplacementField>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamesConfig {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    suffix: String,
    field_specs: Option<Vec<FieldSpec>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LabelsConfig {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    field_specs: Vec<FieldSpec>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct NamespaceConfig {
    field_specs: Vec<FieldSpec>,
    unset_only: bool,
    set_role_binding_subjects: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ImageConfig {
    image_tag: Image,
    field_specs: Vec<FieldSpec>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ReplicaConfig {
    replica: Replica,
    field_specs: Vec<FieldSpec>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct PatchConfig {
    path: Option<String>,
    patch: Option<String>,
    json_op: Option<String>,
    target: Option<Selector>,
    options: BTreeMap<String, bool>,
}

impl PatchConfig {
    /// The config as a `patches` entry; `inline` replaces the inline patch text.
    fn into_patch(self, inline: Option<String>) -> Patch {
        Patch {
            path: self.path.filter(|p| !p.is_empty()),
            patch: inline.or(self.patch).filter(|p| !p.trim().is_empty()),
            target: self.target,
            options: self.options,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct StrategicMergeConfig {
    paths: Vec<String>,
    patches: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{BuildOptions, build};

    /// The error of building `app` with these files.
    fn build_err(files: &[(&str, &str)]) -> String {
        let tmp = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = tmp.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        build(tmp.path(), Path::new("app"), &BuildOptions::new())
            .unwrap_err()
            .to_string()
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";

    #[test]
    fn external_plugins_are_refused_naming_their_kind() {
        let err = build_err(&[
            (
                "app/kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [t.yaml]\n",
            ),
            ("app/cm.yaml", CM),
            (
                "app/t.yaml",
                "apiVersion: example.com/v1\nkind: Stamp\nmetadata:\n  name: s\n",
            ),
        ]);
        assert_eq!(
            err,
            "app/kustomization.yaml: external plugins disabled; unable to load external plugin 'Stamp'"
        );
    }

    #[test]
    fn a_generator_is_not_a_transformer() {
        let err = build_err(&[
            (
                "app/kustomization.yaml",
                "resources: [cm.yaml]\ntransformers: [g.yaml]\n",
            ),
            ("app/cm.yaml", CM),
            (
                "app/g.yaml",
                "apiVersion: builtin\nkind: SecretGenerator\nmetadata:\n  name: g\n",
            ),
        ]);
        assert_eq!(
            err,
            "app/kustomization.yaml: plugin SecretGenerator.builtin.[noGrp]/g.[noNs] not a transformer"
        );
    }

    #[test]
    fn prefix_suffix_needs_field_specs() {
        let err = build_err(&[
            (
                "app/kustomization.yaml",
                "resources: [cm.yaml]\ntransformers:\n- |\n  apiVersion: builtin\n  kind: PrefixSuffixTransformer\n  metadata:\n    name: p\n  prefix: x-\n",
            ),
            ("app/cm.yaml", CM),
        ]);
        assert_eq!(
            err,
            "app/kustomization.yaml: plugin PrefixSuffixTransformer.builtin.[noGrp]/p.[noNs] fails configuration: fieldSpecs is not expected to be nil"
        );
    }

    #[test]
    fn a_validator_that_changes_the_build_fails() {
        let err = build_err(&[
            (
                "app/kustomization.yaml",
                "resources: [cm.yaml]\nvalidators: [v.yaml]\n",
            ),
            ("app/cm.yaml", CM),
            (
                "app/v.yaml",
                "apiVersion: builtin\nkind: LabelTransformer\nmetadata:\n  name: v\nlabels: {a: b}\nfieldSpecs:\n- {path: metadata/labels, create: true}\n",
            ),
        ]);
        assert_eq!(
            err,
            "app/kustomization.yaml: validator shouldn't modify the resource map"
        );
    }

    #[test]
    fn helm_chart_configs_are_refused() {
        let err = build_err(&[
            ("app/kustomization.yaml", "generators: [h.yaml]\n"),
            (
                "app/h.yaml",
                "apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata:\n  name: h\n",
            ),
        ]);
        assert_eq!(
            err,
            "app/kustomization.yaml: plugin HelmChartInflationGenerator.builtin.[noGrp]/h.[noNs] fails configuration: must specify --enable-helm"
        );
    }
}
