//! Accumulation of one kustomization and its bases, generators, components and
//! transformers (kustomize's KustTarget), plus the steps done once at the top level.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::configurations;
use super::error::BuildError;
use super::file::{Config, FILE_NAMES, FieldSpec, Kind, KustomizationFile};
use super::generators::{self, GenKind};
use super::loader::Loader;
use super::packed::Packed;
use super::patch::schema::{CustomSchema, SchemaChoice};
use super::patch::transformer as patches;
use super::resmap::{Origin, ResMap, Resource};
use super::transform::{self, fieldspecs};
use super::{buildmeta, nameref, plugins, remote, replacements, vars, yaml};

/// Annotation marking objects that configure the build and are not part of its output.
const LOCAL_CONFIG: &str = "config.kubernetes.io/local-config";
/// Annotation recording where an object came from (`buildMetadata: [originAnnotations]`).
const ORIGIN: &str = "config.kubernetes.io/origin";
/// How deep bases and components may nest. Each level is a stack frame of the recursion
/// below; a tree with tens of thousands of chained directories would otherwise overflow the
/// stack and abort the whole process, every tenant's reconcile with it.
const MAX_DEPTH: usize = 100;

/// The only builtin schema version kustomize v5.8.1 has.
const BUILTIN_OPENAPI_VERSION: &str = "v1.21.2";

/// The schema `k`'s `openapi` field picks for the build.
fn openapi_schema(
    loader: &Loader,
    dir: &Path,
    file: &Path,
    shown: &str,
    k: &KustomizationFile,
) -> Result<SchemaChoice, BuildError> {
    let fail = |message: String| BuildError::Kustomization {
        file: shown.to_string(),
        message,
    };
    match (k.openapi.get("path"), k.openapi.get("version")) {
        (Some(_), Some(_)) => Err(fail(
            "builtin version and custom schema provided, cannot use both".into(),
        )),
        (None, Some(version)) if version != BUILTIN_OPENAPI_VERSION => {
            Err(fail("the specified OpenAPI version is not built in".into()))
        }
        (None, Some(_)) => Ok(SchemaChoice::Builtin),
        // kustomize loads the path as any file: a URL is fetched (through the remote hook, with
        // its bounds), anything else is read below the root.
        (Some(url), None) if remote::is_http_url(url) => {
            let Some(source) = loader.remote() else {
                return Err(BuildError::Remote {
                    file: shown.to_string(),
                    url: url.clone(),
                });
            };
            let failed = |message: String| BuildError::RemoteFetch {
                file: shown.to_string(),
                url: url.clone(),
                message,
            };
            let bytes = source.file(url).map_err(failed)?;
            let text =
                String::from_utf8(bytes).map_err(|_| failed("the response is not valid UTF-8".into()))?;
            let schema = CustomSchema::parse(&text, url).map_err(fail)?;
            Ok(SchemaChoice::Custom(std::sync::Arc::new(schema)))
        }
        (Some(path), None) => {
            let path = dir.join(path);
            let text = loader.read_text(&path, file)?;
            let schema = CustomSchema::parse(&text, &loader.show(&path)).map_err(fail)?;
            Ok(SchemaChoice::Custom(std::sync::Arc::new(schema)))
        }
        (None, None) => Ok(SchemaChoice::Unset),
    }
}

/// What a build produced.
#[derive(Debug)]
pub struct Manifests {
    /// The objects, in output order.
    pub objects: Vec<Packed>,
    /// What the build accepted, as kustomize does, but is probably a mistake; each names
    /// its file.
    pub warnings: Vec<String>,
}

/// Builds the kustomization in `dir`; `override_text` replaces its kustomization file.
pub(crate) fn build_root(
    loader: &Loader,
    dir: &Path,
    override_text: Option<&str>,
) -> Result<Manifests, BuildError> {
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        loader.root().join(dir)
    };
    let dir = loader.resolve(&dir, &dir)?;
    let mut map = ResMap::default();
    let mut visiting = Vec::new();
    accumulate(loader, &dir, override_text, None, &mut visiting, &mut map)?;
    map.each(|res| {
        if res.generated.as_ref().is_some_and(|g| g.hash_suffix) {
            let name = format!("{}-{}", res.id().name, generators::content_hash(&res.obj()));
            res.set_name(name);
        }
    });
    nameref::fix(&mut map)?;
    vars::resolve(&mut map)?;
    let root = root_kustomization(loader, &dir, override_text)?;
    if let Some(sort) = root.sort_options.filter(|s| s.order == "legacy") {
        super::sort::legacy(&mut map, sort.legacy_sort_options.as_ref());
    }
    if root.build_metadata.iter().any(|b| b == "transformerAnnotations") {
        buildmeta::annotate(&mut map, |path| relative(&dir, path));
    }
    if root.build_metadata.iter().any(|b| b == "originAnnotations") {
        map.each(|res| {
            if let Some(origin) = &res.origin {
                let text = match origin {
                    Origin::File(path) => format!("path: {}\n", relative(&dir, path)),
                    Origin::Generator { file, kind, name } => {
                        let name = name
                            .as_ref()
                            .map(|n| format!("  name: {n}\n"))
                            .unwrap_or_default();
                        format!(
                            "configuredIn: {}\nconfiguredBy:\n  apiVersion: builtin\n  kind: {kind}\n{name}",
                            relative(&dir, file)
                        )
                    }
                };
                res.set_annotation(ORIGIN, text);
            }
        });
    }
    let mut out = Vec::with_capacity(map.resources.len());
    for mut res in map.resources {
        res.annotations_to_text();
        res.drop_empty_annotations();
        let local = res
            .obj()
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(LOCAL_CONFIG))
            .is_some();
        if local {
            continue;
        }
        // kustomize accepts an object without apiVersion; Flux's layer rejects it later.
        let id = res.id();
        if id.kind.is_empty() {
            return Err(BuildError::MissingField {
                id: id.to_string(),
                field: "kind",
            });
        }
        if id.name.is_empty() {
            return Err(BuildError::MissingField {
                id: id.to_string(),
                field: "metadata.name",
            });
        }
        out.push(res.into_packed());
    }
    Ok(Manifests {
        objects: out,
        warnings: map.warnings,
    })
}

/// `to` relative to directory `from` (both canonical), with `..` where needed.
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to_parts: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to_parts).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to_parts[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

/// The root kustomization: its `sortOptions` and `buildMetadata` apply to the whole build.
fn root_kustomization(
    loader: &Loader,
    dir: &Path,
    override_text: Option<&str>,
) -> Result<KustomizationFile, BuildError> {
    let (file, text) = read_kustomization(loader, dir, override_text)?;
    Ok(KustomizationFile::parse(&text, &loader.show(&file))?.0)
}

/// The kustomization file of `dir` and its text, or `override_text` standing in for it.
fn read_kustomization(
    loader: &Loader,
    dir: &Path,
    override_text: Option<&str>,
) -> Result<(PathBuf, String), BuildError> {
    match override_text {
        Some(text) => Ok((dir.join(FILE_NAMES[0]), text.to_string())),
        None => {
            let file = kustomization_file(loader, dir)?;
            let text = loader.read_text(&file, &file)?;
            Ok((file, text))
        }
    }
}

/// Finds the kustomization file of `dir`; more than one recognised name is an error.
fn kustomization_file(loader: &Loader, dir: &Path) -> Result<PathBuf, BuildError> {
    let found: Vec<PathBuf> = FILE_NAMES
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| loader.is_file(p))
        .collect();
    match found.len() {
        1 => Ok(found.into_iter().next().expect("one element")),
        0 => Err(BuildError::Kustomization {
            file: loader.show(dir),
            message: format!(
                "unable to find one of {} in directory",
                FILE_NAMES.map(|n| format!("'{n}'")).join(", ")
            ),
        }),
        _ => Err(BuildError::Kustomization {
            file: loader.show(dir),
            message: "found multiple kustomization files".into(),
        }),
    }
}

/// An entry that names no local path: an HTTP(S) file or a Git repository in kustomize's
/// URL grammar.
fn is_remote(entry: &str) -> bool {
    entry.contains("://") || remote::parse_repo_spec(entry).is_ok()
}

/// The objects of one YAML file; `path` is recorded as their origin when local.
fn file_resources(text: &str, origin: &str, path: Option<&Path>) -> Result<ResMap, BuildError> {
    let resources = yaml::parse_resources_with_nulls(text, origin, |obj, implicit_nulls| {
        if obj.get("kind").and_then(Value::as_str).is_none_or(str::is_empty) {
            let name = super::resmap::str_at(&obj, &["metadata", "name"]);
            return Err(BuildError::Kustomization {
                file: origin.to_string(),
                message: format!("missing kind in object '{name}'"),
            });
        }
        let mut res = Resource::new(obj);
        res.origin = path.map(|p| Origin::File(p.to_path_buf()));
        res.implicit_nulls = implicit_nulls;
        Ok(res)
    })?;
    Ok(ResMap {
        resources,
        ..ResMap::default()
    })
}

/// Accumulates a remote entry of the kustomization file `shown`. As kustomize does, an
/// HTTP(S) URL is first fetched as a YAML file and only then, if that fails and it reads as
/// a Git URL, cloned. A repository is built as a root of its own: nothing in it may reach
/// outside the checked-out tree.
fn accumulate_remote(
    loader: &Loader,
    entry: &str,
    shown: &str,
    kind: Kind,
    visiting: &mut Vec<PathBuf>,
    map: &mut ResMap,
) -> Result<(), BuildError> {
    let Some(source) = loader.remote() else {
        return Err(BuildError::Remote {
            file: shown.to_string(),
            url: entry.to_string(),
        });
    };
    let failed = |message: String| BuildError::RemoteFetch {
        file: shown.to_string(),
        url: entry.to_string(),
        message,
    };
    let spec = remote::parse_repo_spec(entry);
    let mut file_error = None;
    if kind == Kind::Kustomization && remote::is_http_url(entry) {
        let fetched = source.file(entry).and_then(|bytes| {
            String::from_utf8(bytes).map_err(|_| "the response is not valid UTF-8".to_string())
        });
        match fetched.map(|text| file_resources(&text, entry, None)) {
            Ok(Ok(loaded)) => return map.append_all(loaded, shown),
            Ok(Err(e)) if spec.is_err() => return Err(e),
            Err(message) if spec.is_err() => return Err(failed(message)),
            Ok(Err(e)) => file_error = Some(e.to_string()),
            Err(message) => file_error = Some(message),
        }
    }
    let spec = spec.map_err(|e| failed(format!("not a Git repository URL: {e}")))?;
    let with_file_error = |message: String| match &file_error {
        Some(f) => failed(format!("{message} (fetched as a file: {f})")),
        None => failed(message),
    };
    let tree = source.repository(&spec).map_err(with_file_error)?;
    // Its place on disk stays out of the message, as every other path does.
    let sub_loader = loader.for_tree(&tree).map_err(|e| match e {
        BuildError::Io { message, .. } => failed(format!("the checkout cannot be read: {message}")),
        other => other,
    })?;
    let dir = sub_loader.root().join(&spec.path);
    if !sub_loader.is_dir(&dir) {
        return Err(failed(format!(
            "'{}' is not a directory in the repository",
            if spec.path.is_empty() { "." } else { &spec.path }
        )));
    }
    let dir = sub_loader.resolve(&dir, &dir)?;
    if kind == Kind::Component {
        // A component transforms what has been accumulated so far, as a local one does.
        return accumulate(&sub_loader, &dir, None, Some(kind), visiting, map);
    }
    let mut sub = ResMap::default();
    accumulate(&sub_loader, &dir, None, Some(kind), visiting, &mut sub)?;
    map.append_all(sub, shown)
}

fn accumulate(
    loader: &Loader,
    dir: &Path,
    override_text: Option<&str>,
    expected: Option<Kind>,
    visiting: &mut Vec<PathBuf>,
    map: &mut ResMap,
) -> Result<(), BuildError> {
    if visiting.len() >= MAX_DEPTH {
        return Err(BuildError::Kustomization {
            file: loader.show(dir),
            message: format!("bases and components nested deeper than {MAX_DEPTH} levels"),
        });
    }
    if visiting.iter().any(|v| v.starts_with(dir)) {
        return Err(BuildError::Cycle {
            path: loader.display(dir),
        });
    }
    let (file, text) = read_kustomization(loader, dir, override_text)?;
    let shown = loader.show(&file);
    let (k, kind) = KustomizationFile::parse(&text, &shown)?;
    // The root may be either kind: a Component built directly builds like a Kustomization.
    if let Some(expected) = expected
        && kind != expected
    {
        let want = if expected == Kind::Component {
            "Component"
        } else {
            "Kustomization"
        };
        return Err(BuildError::Kustomization {
            file: shown,
            message: format!(
                "expected kind '{want}' here (resources take Kustomizations, components take Components)"
            ),
        });
    }
    visiting.push(dir.to_path_buf());
    let result = accumulate_body(loader, dir, &file, &shown, &k, visiting, map);
    visiting.pop();
    result
}

fn accumulate_body(
    loader: &Loader,
    dir: &Path,
    file: &Path,
    shown: &str,
    k: &KustomizationFile,
    visiting: &mut Vec<PathBuf>,
    map: &mut ResMap,
) -> Result<(), BuildError> {
    if matches!(map.schema, SchemaChoice::Unset) {
        map.schema = openapi_schema(loader, dir, file, shown, k)?;
    }
    for entry in &k.resources {
        let path = dir.join(entry);
        if loader.is_file(&path) {
            let text = loader.read_text(&path, file)?;
            let origin = loader.show(&path);
            let loaded = file_resources(&text, &origin, Some(&path))?;
            map.append_all(loaded, &origin)?;
        } else if loader.is_dir(&path) {
            let sub_dir = loader.resolve(&path, file)?;
            let mut sub = ResMap {
                schema: map.schema.clone(),
                ..ResMap::default()
            };
            accumulate(
                loader,
                &sub_dir,
                None,
                Some(Kind::Kustomization),
                visiting,
                &mut sub,
            )?;
            map.schema = sub.schema.clone();
            map.append_all(sub, shown)?;
        } else if is_remote(entry) {
            accumulate_remote(loader, entry, shown, Kind::Kustomization, visiting, map)?;
        } else {
            // Surfaces "outside the root" or "missing" with the referring file.
            loader.resolve(&path, file)?;
        }
    }
    for config in [
        configurations::load(loader, dir, file, &k.configurations)?,
        configurations::load_crds(loader, dir, file, &k.crds)?,
    ] {
        map.config
            .merge(&config)
            .map_err(|message| BuildError::Kustomization {
                file: shown.to_string(),
                message,
            })?;
    }
    let ctx = generators::Context { loader, dir, file };
    for args in &k.config_map_generator {
        generators::run(&ctx, map, GenKind::ConfigMap, args, k.generator_options.as_ref())?;
    }
    for args in &k.secret_generator {
        generators::run(&ctx, map, GenKind::Secret, args, k.generator_options.as_ref())?;
    }
    let plugin_ctx = plugins::Context { loader, dir, file };
    plugins::generate(
        &plugin_ctx,
        map,
        &k.generators,
        &mut dir_builder(loader, visiting),
    )?;
    for entry in &k.components {
        if is_remote(entry) {
            accumulate_remote(loader, entry, shown, Kind::Component, visiting, map)?;
            continue;
        }
        let path = dir.join(entry);
        let comp_dir = loader.resolve(&path, file)?;
        accumulate(loader, &comp_dir, None, Some(Kind::Component), visiting, map)?;
    }
    let patch_ctx = patches::Context { loader, dir, file };
    run_transformers(k, &patch_ctx, shown, map)?;
    plugins::transform(
        &plugin_ctx,
        map,
        &k.transformers,
        &mut dir_builder(loader, visiting),
    )?;
    plugins::validate(
        &plugin_ctx,
        map,
        &k.validators,
        &mut dir_builder(loader, visiting),
    )?;
    vars::merge(map, &vars::parse(&k.vars, shown)?, shown)
}

/// Builds a kustomization directory that a plugin entry names, as a base is built.
fn dir_builder<'a>(
    loader: &'a Loader,
    visiting: &'a mut Vec<PathBuf>,
) -> impl FnMut(&Path) -> Result<ResMap, BuildError> + 'a {
    move |sub_dir| {
        let mut sub = ResMap::default();
        accumulate(
            loader,
            sub_dir,
            None,
            Some(Kind::Kustomization),
            visiting,
            &mut sub,
        )?;
        Ok(sub)
    }
}

/// kustomize's builtin transformer order.
fn run_transformers(
    k: &KustomizationFile,
    patch_ctx: &patches::Context<'_>,
    file: &str,
    map: &mut ResMap,
) -> Result<(), BuildError> {
    let ran =
        |map: &mut ResMap, kind: &str, runs: usize| buildmeta::ran(map, patch_ctx.file, kind, None, runs);
    let non_empty = |s: &Option<String>| usize::from(s.as_deref().is_some_and(|s| !s.is_empty()));
    patches::strategic_merge(patch_ctx, map, &k.patches_strategic_merge)?;
    ran(
        map,
        "PatchStrategicMergeTransformer",
        usize::from(!k.patches_strategic_merge.is_empty()),
    );
    patches::patches(patch_ctx, map, &k.patches)?;
    ran(map, "PatchTransformer", k.patches.len());
    let config = map.config.clone();
    refuse_empty_paths(map, k, &config, file)?;
    if let Some(ns) = k.namespace.as_deref().filter(|n| !n.is_empty()) {
        transform::namespace::apply(map, ns);
        configurations::namespace(map, ns, &config.namespace);
        // Renaming Namespace objects (or moving objects) may make two ids collide.
        map.check_unique(file)?;
    }
    let (prefix, suffix) = (
        k.name_prefix.as_deref().unwrap_or(""),
        k.name_suffix.as_deref().unwrap_or(""),
    );
    configurations::prefix_suffix(map, prefix, suffix, &config);
    transform::names::apply(map, prefix, suffix);
    let common_labels =
        configurations::with_builtin(fieldspecs::common_labels(), &config.common_labels, file)?;
    let template_labels =
        configurations::with_builtin(fieldspecs::template_labels(), &config.template_labels, file)?;
    ran(map, "NamespaceTransformer", non_empty(&k.namespace));
    ran(map, "PrefixTransformer", non_empty(&k.name_prefix));
    ran(map, "SuffixTransformer", non_empty(&k.name_suffix));
    for label in &k.labels {
        let mut specs = configurations::with_builtin(label.fields.clone(), &config.labels, file)?;
        specs = if label.include_selectors {
            configurations::with_builtin(specs, &common_labels, file)?
        } else if label.include_templates {
            let s = configurations::with_builtin(specs, &template_labels, file)?;
            configurations::with_builtin(s, &fieldspecs::metadata_labels(), file)?
        } else {
            configurations::with_builtin(specs, &fieldspecs::metadata_labels(), file)?
        };
        transform::labels::apply(map, &label.pairs, &specs, file, "labels")?;
    }
    transform::labels::apply(map, &k.common_labels, &common_labels, file, "commonLabels")?;
    let label_runs = if k.labels.is_empty() && k.common_labels.is_empty() {
        0
    } else {
        k.labels.len() + 1
    };
    ran(map, "LabelTransformer", label_runs);
    transform::labels::apply(
        map,
        &k.common_annotations,
        &configurations::with_builtin(fieldspecs::common_annotations(), &config.common_annotations, file)?,
        file,
        "commonAnnotations",
    )?;
    ran(
        map,
        "AnnotationsTransformer",
        usize::from(!k.common_annotations.is_empty()),
    );
    patches::json6902(patch_ctx, map, &k.patches_json6902)?;
    ran(map, "PatchJson6902Transformer", k.patches_json6902.len());
    for replica in &k.replicas {
        transform::replicas::apply(map, replica, file, &config.replicas)?;
    }
    ran(map, "ReplicaCountTransformer", k.replicas.len());
    for image in &k.images {
        transform::images::apply(map, image, file, &config.images)?;
    }
    ran(map, "ImageTagTransformer", k.images.len());
    let found = replacements::load(
        patch_ctx.loader,
        patch_ctx.dir,
        patch_ctx.file,
        file,
        &k.replacements,
    )?;
    replacements::apply(map, &found, file)
}

/// The field specs of `configurations` and `labels` without a path are refused for every
/// transformer that runs, as kustomize refuses them (only the builtin ones are known good).
fn refuse_empty_paths(
    map: &ResMap,
    k: &KustomizationFile,
    config: &Config,
    file: &str,
) -> Result<(), BuildError> {
    let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let labels = k.labels.iter().flat_map(|l| &l.fields);
    let runs: [(bool, Vec<&FieldSpec>, &str); 7] = [
        (set(&k.namespace), config.namespace.iter().collect(), "namespace"),
        (
            set(&k.name_prefix),
            config.name_prefix.iter().collect(),
            "namePrefix",
        ),
        (
            set(&k.name_suffix),
            config.name_suffix.iter().collect(),
            "nameSuffix",
        ),
        (
            !k.labels.is_empty(),
            labels.chain(&config.labels).collect(),
            "labels",
        ),
        (
            !k.common_labels.is_empty(),
            config
                .common_labels
                .iter()
                .chain(&config.template_labels)
                .collect(),
            "commonLabels",
        ),
        (
            !k.common_annotations.is_empty(),
            config.common_annotations.iter().collect(),
            "commonAnnotations",
        ),
        (
            !k.replicas.is_empty() || !k.images.is_empty(),
            config.replicas.iter().chain(&config.images).collect(),
            "configurations",
        ),
    ];
    for (_, specs, field) in runs.into_iter().filter(|(ran, ..)| *ran) {
        transform::refuse_empty_paths(map, specs, file, field)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::packed;
    use crate::{BuildError, BuildOptions, build};

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    fn build_err(files: &[(&str, &str)], dir: &str) -> BuildError {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), files);
        build(tmp.path(), Path::new(dir), &BuildOptions::new()).unwrap_err()
    }

    /// Directories `d0` -> `../d1` -> ... -> `d{len-1}`, the last holding one ConfigMap.
    fn chain_of_bases(len: usize) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = (0..len)
            .map(|i| {
                let next = if i + 1 < len {
                    format!("../d{}", i + 1)
                } else {
                    "cm.yaml".into()
                };
                (
                    format!("d{i}/kustomization.yaml"),
                    format!("resources: [{next}]\n"),
                )
            })
            .collect();
        files.push((
            format!("d{}/cm.yaml", len - 1),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: end\n".into(),
        ));
        files
    }

    #[test]
    fn bases_nest_up_to_the_depth_limit_and_no_deeper() {
        let tmp = tempfile::tempdir().unwrap();
        let files = chain_of_bases(100);
        let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        write(tmp.path(), &borrowed);
        let built = build(tmp.path(), Path::new("d0"), &BuildOptions::new()).unwrap();
        assert_eq!(built.objects.len(), 1);

        let files = chain_of_bases(101);
        let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        assert_eq!(
            build_err(&borrowed, "d0").to_string(),
            "d100: bases and components nested deeper than 100 levels"
        );
    }

    #[test]
    fn a_cycle_of_bases_fails() {
        let err = build_err(
            &[
                ("a/kustomization.yaml", "resources: [../b]\n"),
                ("b/kustomization.yaml", "resources: [../a]\n"),
            ],
            "a",
        );
        assert_eq!(
            err.to_string(),
            "cycle detected: candidate root 'a' contains a visited root"
        );
    }

    #[test]
    fn duplicate_ids_across_files_fail_naming_the_id() {
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\n";
        let err = build_err(
            &[
                ("app/kustomization.yaml", "resources: [a.yaml, b.yaml]\n"),
                ("app/a.yaml", cm),
                ("app/b.yaml", cm),
            ],
            "app",
        );
        assert_eq!(
            err.to_string(),
            "app/b.yaml: may not add resource with an already registered id: ConfigMap.v1.[noGrp]/same.[noNs]"
        );
    }

    #[test]
    fn a_missing_resource_names_the_kustomization() {
        let err = build_err(&[("app/kustomization.yaml", "resources: [nope.yaml]\n")], "app");
        assert_eq!(
            err.to_string(),
            "app/nope.yaml: no such file or directory (referenced from app/kustomization.yaml)"
        );
    }

    #[test]
    fn a_base_outside_the_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            &[
                ("root/app/kustomization.yaml", "resources: [../../outside]\n"),
                ("outside/kustomization.yaml", "resources: []\n"),
            ],
        );
        let err = build(&tmp.path().join("root"), Path::new("app"), &BuildOptions::new()).unwrap_err();
        assert!(matches!(err, BuildError::OutsideRoot { .. }), "{err}");
        assert!(
            err.to_string()
                .ends_with("outside: path is outside the artifact root (security constraint)"),
            "{err}"
        );
    }

    #[test]
    fn malformed_yaml_in_a_resource_names_file_and_line() {
        let err = build_err(
            &[
                ("app/kustomization.yaml", "resources: [d.yaml]\n"),
                ("app/d.yaml", "kind: A\nmetadata:\n  name: [x\n"),
            ],
            "app",
        );
        assert!(
            matches!(&err, BuildError::Yaml { file, line, .. } if file == "app/d.yaml" && *line >= 3),
            "{err}"
        );
    }

    #[test]
    fn an_oversized_resource_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            &[
                ("app/kustomization.yaml", "resources: [big.yaml]\n"),
                ("app/big.yaml", &"#".repeat(200)),
            ],
        );
        let options = BuildOptions {
            max_file_bytes: 100,
            ..BuildOptions::new()
        };
        let err = build(tmp.path(), Path::new("app"), &options).unwrap_err();
        assert_eq!(
            err.to_string(),
            "app/big.yaml: file is larger than the limit of 100 bytes"
        );
    }

    #[test]
    fn a_non_object_document_is_refused() {
        let err = build_err(
            &[
                ("app/kustomization.yaml", "resources: [l.yaml]\n"),
                ("app/l.yaml", "- a\n"),
            ],
            "app",
        );
        assert_eq!(
            err.to_string(),
            "app/l.yaml: document 1 is not an object (found a list)"
        );
    }

    #[test]
    fn remote_bases_are_refused() {
        let err = build_err(
            &[(
                "app/kustomization.yaml",
                "resources: [https://example.com/x.yaml]\n",
            )],
            "app",
        );
        assert_eq!(
            err.to_string(),
            "app/kustomization.yaml: remote resource 'https://example.com/x.yaml' is not supported (remote bases are disabled)"
        );
    }

    #[test]
    fn the_override_replaces_the_kustomization_file() {
        let tmp = tempfile::tempdir().unwrap();
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";
        write(
            tmp.path(),
            &[
                ("app/kustomization.yaml", "resources: [nope.yaml]\n"),
                ("app/cm.yaml", cm),
            ],
        );
        let options = BuildOptions {
            kustomization_override: Some("resources: [cm.yaml]\nnamespace: x\n".into()),
            ..BuildOptions::new()
        };
        let objs = build(tmp.path(), Path::new("app"), &options).unwrap().objects;
        assert_eq!(
            packed::values(&objs),
            vec![
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}})
            ]
        );
    }
}
