//! The native kustomize engine: a kustomization directory in, Kubernetes objects out.
//!
//! Pure with respect to the cluster: it reads files through a [`loader::Loader`] confined to
//! the artifact root and never talks to the API server. Behaviour follows kustomize
//! api v0.21.1 as Flux runs it (LoadRestrictionsNone inside a secure root, FIFO output,
//! builtin plugins only); fields it does not implement fail with
//! [`BuildError::Unsupported`] instead of building something different.
//! `patch` holds the patch formats and the wiring that applies a kustomization's patch
//! entries; `selector` the target selectors, which Flux's CRD embeds too. The engine depends
//! on no other crate of the workspace; Flux's layer around a build (generated kustomization,
//! spec overrides, post-build substitution, common metadata) is the controller's `flux`
//! module.

use std::path::Path;
use std::sync::Arc;

pub use error::BuildError;
pub use target::Manifests;

pub(crate) mod buildmeta;
pub(crate) mod configurations;
pub(crate) mod error;
pub mod file;
pub(crate) mod folded;
pub(crate) mod generators;
pub mod gvk;
pub mod loader;
pub(crate) mod nameref;
pub mod packed;
pub(crate) mod patch;
pub(crate) mod plugins;
pub mod printer;
pub mod remote;
pub(crate) mod replacements;
pub(crate) mod resmap;
pub mod selector;
pub(crate) mod sort;
pub(crate) mod target;
pub(crate) mod transform;
pub(crate) mod vars;
pub mod yaml;
pub(crate) mod yaml11;

/// Default for [`BuildOptions::max_file_bytes`]: 16 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Options of one build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// YAML text that replaces the kustomization file of `dir` (Flux's generated/overlaid one); None = read it from disk.
    pub(crate) kustomization_override: Option<String>,
    /// Upper bound for any single file read (bytes).
    pub(crate) max_file_bytes: u64,
    /// Where remote bases and HTTP files come from; None refuses them.
    pub(crate) remote: Option<Arc<dyn remote::RemoteResources>>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            kustomization_override: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            remote: None,
        }
    }
}

impl BuildOptions {
    /// Options with the default file size bound and no override.
    pub fn new() -> Self {
        Self::default()
    }

    /// These options with remote entries served by `remote`.
    pub fn with_remote(mut self, remote: Arc<dyn remote::RemoteResources>) -> Self {
        self.remote = Some(remote);
        self
    }

    /// These options with `kustomization` (YAML text) in place of the kustomization file of
    /// the directory built.
    pub fn with_kustomization_override(mut self, kustomization: String) -> Self {
        self.kustomization_override = Some(kustomization);
        self
    }

    /// The upper bound for any single file read (bytes).
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }
}

/// The stack a build runs on. Bases, components and YAML nesting recurse up to their depth
/// limits, which a caller's default 2 MiB thread stack does not hold in a debug build; the
/// memory is reserved, not committed, so only the depth an input reaches costs pages.
const BUILD_STACK_BYTES: usize = 64 << 20;

/// Builds the kustomization in `dir` (inside `root`, the artifact root that confines reads),
/// on a thread of its own so that the depth limits, not the caller's stack, bound recursion.
pub fn build(root: &Path, dir: &Path, options: &BuildOptions) -> Result<Manifests, BuildError> {
    std::thread::scope(|scope| {
        let run = || {
            let loader =
                loader::Loader::new(root, options.max_file_bytes)?.with_remote(options.remote.clone());
            target::build_root(&loader, dir, options.kustomization_override.as_deref())
        };
        let spawned = std::thread::Builder::new()
            .name("kustomize".into())
            .stack_size(BUILD_STACK_BYTES)
            .spawn_scoped(scope, run);
        match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => Err(BuildError::Io {
                path: dir.to_path_buf(),
                message: format!("cannot start the build thread: {e}"),
            }),
        }
    })
}

/// Prints objects as a multi-document YAML stream, the way `kustomize build` separates them.
pub fn to_yaml(objects: &[serde_json::Value]) -> String {
    printer::emit_documents(objects)
}

/// What the patch fuzz targets (`fuzz/`) reach beyond the API: the patch formats, which are
/// otherwise internal. Only the fuzz crate turns the feature on.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use serde_json::Value;

    use crate::patch::{self, PatchDoc, PatchKind};

    /// A patch parsed by the parser the `patches` field uses.
    pub struct Patch(PatchDoc);

    impl Patch {
        /// Parses the text of a patch; `origin` names it in errors.
        pub fn parse(text: &str, origin: &str) -> Result<Patch, String> {
            patch::parse(text, origin).map(Patch).map_err(|e| e.to_string())
        }

        pub fn is_strategic_merge(&self) -> bool {
            matches!(self.0.kind, PatchKind::StrategicMerge(_))
        }

        pub fn is_json6902(&self) -> bool {
            matches!(self.0.kind, PatchKind::Json6902(_))
        }

        /// Applies the patch to `target` with the builtin schema (`Value::Null` when a
        /// strategic merge patch deletes it).
        pub fn apply(&self, target: &Value) -> Result<Value, String> {
            patch::apply(target, &self.0, None).map_err(|e| e.to_string())
        }

        /// Applies a JSON6902 patch with `limit` bytes of memory growth allowed instead of the
        /// production bound; `None` for a strategic merge patch.
        pub fn apply_json6902_within(&self, target: &Value, limit: usize) -> Option<Result<Value, String>> {
            patch::apply_json6902_within(target, &self.0, limit).map(|r| r.map_err(|e| e.to_string()))
        }
    }
}
