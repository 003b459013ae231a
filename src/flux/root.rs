//! The root kustomization Flux builds (fluxcd/pkg/kustomize generator): the directory's own
//! kustomization file, or one generated from the YAML files found under it, with the
//! Kustomization's spec overrides applied. The result is YAML text for
//! `kustomize::BuildOptions::with_kustomization_override`; nothing is written to disk.

use std::path::{Path, PathBuf};

use kustomize::file::FILE_NAMES;
use kustomize::loader::Loader;
use kustomize::{BuildError, yaml};
use serde_json::{Map, Value, json};
use thiserror::Error;

use crate::api::KustomizationSpec;
use crate::api::kustomization::{BuildMetadata, Selector};

/// The top-level fields of kustomize's `Kustomization` type. Flux decodes the root file
/// into that type, so any other key is dropped (not an error, unlike in bases).
const KUSTOMIZATION_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "openapi",
    "namePrefix",
    "nameSuffix",
    "namespace",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "patchesStrategicMerge",
    "patchesJson6902",
    "patches",
    "images",
    "imageTags",
    "replacements",
    "replicas",
    "vars",
    "sortOptions",
    "resources",
    "components",
    "crds",
    "bases",
    "configMapGenerator",
    "secretGenerator",
    "helmGlobals",
    "helmCharts",
    "helmChartInflationGenerator",
    "generatorOptions",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "buildMetadata",
];

/// Why the root kustomization could not be produced.
#[derive(Debug, Error)]
pub enum GenerateError {
    /// A file could not be read inside the artifact root.
    #[error(transparent)]
    Read(#[from] BuildError),
    #[error("failed to decode Kubernetes YAML from {file}: {reason}")]
    Decode { file: String, reason: String },
    #[error("{file}: invalid kustomization: {reason}")]
    Kustomization { file: String, reason: String },
    #[error("component path '{0}' must be local and relative")]
    ComponentPath(String),
}

/// The root kustomization text for `dir` with `spec`'s overrides.
pub(crate) fn root_kustomization(
    loader: &Loader,
    dir: &Path,
    spec: &KustomizationSpec,
) -> Result<String, GenerateError> {
    let dir = loader.resolve(dir, dir)?;
    let mut kustomization = match FILE_NAMES
        .iter()
        .map(|name| dir.join(name))
        .find(|p| loader.is_file(p))
    {
        Some(file) => existing(loader, &file)?,
        None => generated(loader, &dir)?,
    };
    overlay(loader, &dir, &mut kustomization, spec)?;
    serde_yaml::to_string(&Value::Object(kustomization)).map_err(|err| GenerateError::Kustomization {
        file: loader.show(&dir),
        reason: err.to_string(),
    })
}

fn header() -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("apiVersion".into(), json!("kustomize.config.k8s.io/v1beta1"));
    map.insert("kind".into(), json!("Kustomization"));
    map
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// The directory's own file, decoded leniently as Flux does.
fn existing(loader: &Loader, file: &Path) -> Result<Map<String, Value>, GenerateError> {
    let shown = loader.show(file);
    let text = loader.read_text(file, file)?;
    let parsed = yaml::parse_object_yaml11(&text, &shown).map_err(|err| GenerateError::Kustomization {
        file: shown.clone(),
        reason: err.to_string(),
    })?;
    let mut kustomization = header();
    for (key, value) in parsed {
        if KUSTOMIZATION_FIELDS.contains(&key.as_str()) && !is_empty(&value) {
            kustomization.insert(key, value);
        }
    }
    if !kustomization.contains_key("resources") {
        // Keeps kustomize from refusing a root that only has generators or components.
        kustomization.insert("buildMetadata".into(), json!(["originAnnotations"]));
    }
    Ok(kustomization)
}

/// A kustomization listing every Kubernetes YAML file under `dir`, and every subdirectory
/// that has its own kustomization file (not descended into).
fn generated(loader: &Loader, dir: &Path) -> Result<Map<String, Value>, GenerateError> {
    let mut resources = Vec::new();
    scan(loader, dir, dir, &mut resources)?;
    let mut kustomization = header();
    if resources.is_empty() {
        // Builds to nothing, where an empty kustomization would be an error.
        kustomization.insert("namespace".into(), json!("_placeholder"));
    } else {
        kustomization.insert("resources".into(), json!(resources));
    }
    Ok(kustomization)
}

fn scan(loader: &Loader, base: &Path, dir: &Path, resources: &mut Vec<String>) -> Result<(), GenerateError> {
    let io = |err: std::io::Error| BuildError::Io {
        path: loader.display(dir),
        message: err.to_string(),
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for path in entries {
        let relative = format!(
            "./{}",
            path.strip_prefix(base)
                .expect("entries are under the base")
                .to_string_lossy()
        );
        // Like Go's filepath.Walk: a symlink is never descended into.
        let metadata = std::fs::symlink_metadata(&path).map_err(io)?;
        if metadata.is_dir() {
            if FILE_NAMES.iter().any(|name| loader.is_file(&path.join(name))) {
                resources.push(relative);
            } else {
                scan(loader, base, &path, resources)?;
            }
            continue;
        }
        if !matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            continue;
        }
        let text = loader.read_text(&path, dir)?;
        let decode_error = |reason: String| GenerateError::Decode {
            file: relative.clone(),
            reason,
        };
        let objects =
            yaml::parse_resources(&text, &relative, Ok).map_err(|err| decode_error(err.to_string()))?;
        // kustomize's resource factory validates each object's metadata.
        for object in &objects {
            let text = |value: Option<&Value>| value.and_then(Value::as_str).unwrap_or("").to_string();
            let kind = text(object.get("kind"));
            let name = text(object.get("metadata").and_then(|m| m.get("name")));
            if kind.is_empty() {
                return Err(decode_error("missing kind in object".to_string()));
            }
            if name.is_empty() && !kind.ends_with("List") {
                return Err(decode_error(format!("missing metadata.name in {kind} object")));
            }
        }
        resources.push(relative);
    }
    Ok(())
}

/// Flux's spec overrides, in the generator's order.
fn overlay(
    loader: &Loader,
    dir: &Path,
    kustomization: &mut Map<String, Value>,
    spec: &KustomizationSpec,
) -> Result<(), GenerateError> {
    let overrides = [
        ("namespace", &spec.target_namespace),
        ("namePrefix", &spec.name_prefix),
        ("nameSuffix", &spec.name_suffix),
    ];
    for (field, value) in overrides {
        if let Some(value) = value {
            kustomization.insert(field.into(), json!(value));
        }
    }
    append(
        kustomization,
        "patches",
        spec.patches.iter().map(|p| {
            let mut entry = json!({"patch": p.patch});
            if let Some(target) = &p.target {
                entry["target"] = selector(target);
            }
            entry
        }),
    );
    let mut components = Vec::new();
    for component in &spec.components {
        if !is_local_relative_path(component) {
            return Err(GenerateError::ComponentPath(component.clone()));
        }
        let path = dir.join(component);
        if spec.ignore_missing_components && !loader.is_dir(&path) && !loader.is_file(&path) {
            continue;
        }
        components.push(json!(component));
    }
    append(kustomization, "components", components.into_iter());
    merge_images(kustomization, spec);
    if !spec.build_metadata.is_empty() {
        let options: Vec<&str> = spec
            .build_metadata
            .iter()
            .map(|option| match option {
                BuildMetadata::OriginAnnotations => "originAnnotations",
                BuildMetadata::TransformerAnnotations => "transformerAnnotations",
            })
            .collect();
        kustomization.insert("buildMetadata".into(), json!(options));
    }
    Ok(())
}

/// Flux's `IsLocalRelativePath`: not absolute, and not a URL or a git remote (a `file://`
/// prefix is allowed when the rest is relative).
fn is_local_relative_path(path: &str) -> bool {
    let path = match path.strip_prefix("file://") {
        Some(rest) => rest,
        None if path.contains("://") => return false,
        None => path,
    };
    let remote = path.starts_with("git@")
        || path.starts_with("git::")
        || ["github.com/", "gitlab.com/", "bitbucket.org/"]
            .iter()
            .any(|host| path.starts_with(host));
    !path.is_empty() && !Path::new(path).is_absolute() && !remote
}

fn append(kustomization: &mut Map<String, Value>, field: &str, items: impl Iterator<Item = Value>) {
    let items: Vec<Value> = items.collect();
    if items.is_empty() {
        return;
    }
    let list = kustomization.entry(field).or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    list.as_array_mut().expect("made a list").extend(items);
}

fn selector(target: &Selector) -> Value {
    Value::Object(
        target
            .set_fields()
            .map(|(key, value)| (key.to_string(), json!(value)))
            .collect(),
    )
}

/// `spec.images` merged by exact name: newName replaced when set, newTag and digest
/// replaced together when either is set; unknown names are appended.
fn merge_images(kustomization: &mut Map<String, Value>, spec: &KustomizationSpec) {
    let mut appended = Vec::new();
    for image in &spec.images {
        let existing = kustomization
            .get_mut("images")
            .and_then(Value::as_array_mut)
            .and_then(|images| {
                images
                    .iter_mut()
                    .find(|i| i["name"].as_str() == Some(image.name.as_str()))
            });
        let Some(Value::Object(entry)) = existing else {
            let mut entry = Map::new();
            entry.insert("name".into(), json!(image.name));
            set_image_fields(&mut entry, image);
            appended.push(Value::Object(entry));
            continue;
        };
        set_image_fields(entry, image);
    }
    append(kustomization, "images", appended.into_iter());
}

fn set_image_fields(entry: &mut Map<String, Value>, image: &crate::api::kustomization::Image) {
    if let Some(new_name) = &image.new_name {
        entry.insert("newName".into(), json!(new_name));
    }
    if image.new_tag.is_some() || image.digest.is_some() {
        for (key, value) in [("newTag", &image.new_tag), ("digest", &image.digest)] {
            match value {
                Some(v) => entry.insert(key.into(), json!(v)),
                None => entry.remove(key),
            };
        }
    }
}
