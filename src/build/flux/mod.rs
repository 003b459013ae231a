//! Flux's layer around a kustomize build: the generated or overlaid root kustomization,
//! post-build substitution and `commonMetadata`.

mod envsubst;
pub mod substitute;

pub use envsubst::EnvsubstError;
