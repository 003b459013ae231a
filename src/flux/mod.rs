//! Flux's layer around a kustomize build: the generated or overlaid root kustomization,
//! post-build substitution and `commonMetadata`, in the order kustomize-controller runs
//! them.

mod envsubst;
pub(crate) mod root;
pub(crate) mod substitute;

use std::collections::BTreeMap;
use std::path::Path;

use kustomize::gvk::split_api_version;
use kustomize::packed::Packed;
use kustomize::{self, BuildError, BuildOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

pub use envsubst::EnvsubstError;
pub use root::GenerateError;
pub use substitute::SubstituteError;
pub(crate) use substitute::{SubstituteOptions, merge_vars};

use crate::api::KustomizationSpec;
use crate::api::conditions::reason::BUILD_FAILED;
use crate::api::kustomization::{CommonMetadata, SubstituteStrategy};
use crate::deadline::{Deadline, Interrupted};
use crate::error::{Retry, StepError};
use crate::sops;

/// The objects as the controller applies them, and the digest of the build output.
#[derive(Clone, Debug, PartialEq)]
pub struct Built {
    pub objects: Vec<Packed>,
    /// `sha256:<hex>` of the multi-document YAML after substitution (before
    /// `commonMetadata`, which Flux applies later, at apply time). Our YAML printer is not
    /// byte-identical to kustomize's, so the value differs from Flux's for the same input.
    pub(crate) digest: String,
    /// What kustomize accepts but is probably a mistake (see [`kustomize::Manifests`]).
    pub warnings: Vec<String>,
    /// Values SOPS decryption revealed: masked wherever a message could echo them.
    pub(crate) masks: Vec<String>,
}

/// Why a Flux build failed; every variant maps to the `BuildFailed` reason, with Flux's
/// message formats.
#[derive(Debug, Error)]
pub enum FluxBuildError {
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error("kustomize build failed: {0}")]
    Build(#[from] BuildError),
    #[error("post build failed for '{id}': envsubst error: {source}")]
    PostBuild { id: String, source: SubstituteError },
    #[error(transparent)]
    Interrupted(#[from] Interrupted),
    #[error("error decrypting sources: {0}")]
    Sources(#[from] sops::sources::SourceError),
    #[error("decryption failed for '{id}': failed to decrypt and format {object} data: {source}")]
    Decrypt {
        id: String,
        object: String,
        source: sops::SopsError,
    },
}

/// Flux requeues a failed build after `spec.retryInterval`, without backoff: a new revision
/// or a fixed ConfigMap of variables may arrive at any time.
impl StepError for FluxBuildError {
    fn reason(&self) -> &'static str {
        BUILD_FAILED
    }

    /// A document whose data key only a key service we lack can unwrap stays undecryptable.
    fn retry(&self) -> Retry {
        match self {
            FluxBuildError::Sources(e) if e.is_unsupported() => Retry::Terminal,
            FluxBuildError::Decrypt { source, .. } if source.is_unsupported() => Retry::Terminal,
            _ => Retry::RetryInterval,
        }
    }
}

/// Builds `dir` (inside the artifact `root`) as Flux does for `spec`: root kustomization
/// with overrides, kustomize build, post-build substitution with `vars` (already merged,
/// see [`merge_vars`]) when `spec.postBuild` is set, then `commonMetadata`. Substitution is
/// strict, as with Flux's default feature gates.
pub fn build(
    root: &Path,
    dir: &Path,
    spec: &KustomizationSpec,
    vars: &BTreeMap<String, String>,
    options: &BuildOptions,
) -> Result<Built, FluxBuildError> {
    build_until(root, dir, spec, vars, options, Deadline::after(spec.timeout()))
}

/// [`build`] within `deadline` (remote entries are bounded by `options`' fetcher).
pub fn build_until(
    root: &Path,
    dir: &Path,
    spec: &KustomizationSpec,
    vars: &BTreeMap<String, String>,
    options: &BuildOptions,
    deadline: Deadline,
) -> Result<Built, FluxBuildError> {
    build_decrypting(root, dir, spec, vars, options, true, None, deadline)
}

/// [`build`] with the `StrictPostBuildSubstitutions` feature gate given (when off, an unset
/// variable expands to "" instead of failing), decrypting SOPS documents with `keys` (given
/// exactly when `spec.decryption` is set): first the generator sources, in a private copy
/// of the tree, then each built object. Each object checks `deadline` first: a build
/// abandoned at spec.timeout or canceled at shutdown stops instead of running on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_decrypting(
    root: &Path,
    dir: &Path,
    spec: &KustomizationSpec,
    vars: &BTreeMap<String, String>,
    options: &BuildOptions,
    strict_substitution: bool,
    keys: Option<&sops::Keys>,
    deadline: Deadline,
) -> Result<Built, FluxBuildError> {
    let workspace = sops::sources::Workspace::new(root, dir, keys)?;
    let (root, dir) = (workspace.root.as_path(), workspace.dir.as_path());
    let loader = kustomize::loader::Loader::new(root, options.max_file_bytes())?;
    let dir = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        loader.root().join(dir)
    };
    let kustomization = root::root_kustomization(&loader, &dir, spec)?;
    let options = options.clone().with_kustomization_override(kustomization);
    let kustomize::Manifests { objects, warnings } = kustomize::build(root, &dir, &options)?;
    let substitute_options = spec.post_build.as_ref().map(|post_build| SubstituteOptions {
        strict: strict_substitution,
        always: post_build.substitute_strategy == Some(SubstituteStrategy::Always),
        max_bytes: usize::try_from(options.max_file_bytes()).unwrap_or(usize::MAX),
    });
    // One object is open at a time: substituted, digested as Flux digests the build
    // output, then dropped when Flux's decoding would drop it.
    let mut hasher = Sha256::new();
    let mut applicable = Vec::with_capacity(objects.len());
    let mut masks = workspace.secrets.clone();
    for (i, packed) in objects.into_iter().enumerate() {
        deadline.check()?;
        let mut object = packed.to_value();
        let mut changed = false;
        if let Some(keys) = keys.filter(|_| !sops::is_disabled(&object)) {
            let decrypted =
                sops::decrypt_object(&object, keys).map_err(|source| FluxBuildError::Decrypt {
                    id: resource_id(&object),
                    object: format!(
                        "'{}/{}' {}",
                        object["metadata"]["namespace"].as_str().unwrap_or(""),
                        object["metadata"]["name"].as_str().unwrap_or(""),
                        object["kind"].as_str().unwrap_or("")
                    ),
                    source,
                })?;
            if let Some(decrypted) = decrypted {
                object = decrypted.value;
                masks.extend(decrypted.secrets);
                changed = true;
            }
        }
        if let Some(options) = substitute_options {
            object = substitute::substitute(&object, vars, options).map_err(|source| {
                FluxBuildError::PostBuild {
                    id: resource_id(&object),
                    source,
                }
            })?;
            changed = true;
        }
        if i > 0 {
            hasher.update(b"---\n");
        }
        hasher.update(kustomize::printer::emit_document(&object).as_bytes());
        if !is_applicable(&object) {
            continue;
        }
        if let Some(common) = &spec.common_metadata {
            apply_common_metadata(&mut object, common);
            changed = true;
        }
        applicable.push(if changed { Packed::new(&object) } else { packed });
    }
    let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
    Ok(Built {
        objects: applicable,
        digest,
        warnings,
        masks,
    })
}

/// kustomize's resource id as Flux prints it: `Kind.version.group/name`, with `[noGrp]`
/// for the core group.
fn resource_id(object: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or("").to_string();
    let api_version = text(&object["apiVersion"]);
    let (group, version) = split_api_version(&api_version);
    let or = |value: &str, missing: &str| {
        if value.is_empty() {
            missing.to_string()
        } else {
            value.to_string()
        }
    };
    format!(
        "{}.{}.{}/{}",
        or(&text(&object["kind"]), "[noKind]"),
        or(version, "[noVer]"),
        or(group, "[noGrp]"),
        text(&object["metadata"]["name"])
    )
}

/// Flux drops documents that are not objects it can apply: those without apiVersion, kind
/// or name, and kustomization files that ended up among the resources.
fn is_applicable(object: &Value) -> bool {
    let present = |value: &Value| value.as_str().is_some_and(|s| !s.is_empty());
    let is_kustomization = object["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("kustomize.config.k8s.io/"))
        && object["kind"].as_str() == Some("Kustomization");
    present(&object["apiVersion"])
        && present(&object["kind"])
        && present(&object["metadata"]["name"])
        && !is_kustomization
}

/// `spec.commonMetadata`: labels and annotations on metadata only, overriding same keys.
fn apply_common_metadata(object: &mut Value, common: &CommonMetadata) {
    for (field, entries) in [("labels", &common.labels), ("annotations", &common.annotations)] {
        let Some(entries) = entries.as_ref().filter(|e| !e.is_empty()) else {
            continue;
        };
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        let map = metadata
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        let map = map.as_object_mut().expect("made an object");
        for (key, value) in entries {
            map.insert(key.clone(), Value::String(value.clone()));
        }
    }
}

#[cfg(test)]
mod tests;
