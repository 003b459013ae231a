//! The kustomize engine: a directory of manifests in, Kubernetes objects out (pure: no
//! cluster access). `patch` holds the patch formats and target selectors kustomize uses;
//! `flux` is Flux's layer around a build (generated kustomization, spec overrides,
//! post-build substitution, common metadata).

pub mod flux;
pub mod patch;
